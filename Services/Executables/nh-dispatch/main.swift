import NHDispatch

DispatchMain.main()
