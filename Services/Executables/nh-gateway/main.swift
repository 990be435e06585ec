import NHGateway

GatewayMain.main()
