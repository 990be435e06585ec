import NHAgent

AgentMain.main()
