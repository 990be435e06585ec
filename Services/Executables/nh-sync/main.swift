import NHSync

SyncMain.main()
