import NHPublish

PublishMain.main()
