import NHCtl

CtlMain.main()
