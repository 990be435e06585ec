import NHRegistry

RegistryMain.main()
