import NHSyncStore

SyncStoreMain.main()
