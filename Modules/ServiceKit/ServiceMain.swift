import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The start and end every service shares: arguments, config (exit 2 when bad), data folder,
/// logging, signals, the loop, and a clean exit 0 after SIGINT or SIGTERM.
public enum ServiceMain {
    /// - Parameters:
    ///   - usage: the text `--help` prints; by default, the options every service takes.
    ///   - configName: the file in the installed config folder read when no config is named.
    public static func run(
        name: String, summary: String, usage fullUsage: String? = nil,
        arguments: [String] = Array(CommandLine.arguments.dropFirst()),
        environment: [String: String] = ProcessInfo.processInfo.environment,
        configName: String = "hub.json",
        dataFolder: ((HubConfig) -> URL)? = nil,
        check: ((HubConfig) throws -> Void)? = nil,
        setUp: (ServiceContext) throws -> Void
    ) -> Never {
        let parsed: Arguments
        do {
            parsed = try Arguments(arguments, valued: ["config"], flags: ["version", "check-config"])
            if let extra = parsed.positionals.first {
                throw Arguments.Error(description: "unexpected argument '\(extra)'")
            }
        } catch {
            fail(name, "\(error)")
        }
        if parsed.has("help") {
            print(fullUsage ?? usage(name: name, summary: summary))
            exit(0)
        }
        if parsed.has("version") {
            print("\(name) \(HubVersion.description)")
            exit(0)
        }
        let config: HubConfig
        do {
            config = try ConfigLoader.load(file: ConfigLoader.file(option: parsed[option: "config"], environment: environment, installedName: configName), environment: environment)
        } catch {
            fail(name, "config error: \(error)")
        }
        if parsed.has("check-config") {
            // What the service's start reads beyond the config itself, such as key files.
            do {
                try check?(config)
            } catch {
                fail(name, "config error: \(error)")
            }
            print("\(name): config ok")
            exit(0)
        }
        let directory = dataFolder?(config) ?? URL(fileURLWithPath: config.dataDir, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            fail(name, "config error: cannot create data folder '\(directory.path)': \(error.localizedDescription)")
        }
        var logger = Logger(service: name)
        logger.level = Logger.Level(name: config.logLevel) ?? .info
        let loop = EventLoop(logger: logger)
        let context = ServiceContext(runtime: ServiceRuntime(name: name, config: config, logger: logger, loop: loop, dataDirectory: directory))
        do {
            try setUp(context)
            logger.info("started", ("pid", getpid()), ("data", directory.path))
            try loop.run()
        } catch let error as ConfigError {
            // Settings found unusable only when the service reads them, such as a key file that does not load.
            logger.error("config error", ("error", error.description))
            context.shutdown()
            exit(2)
        } catch {
            logger.error("stopped on error", ("error", "\(error)"))
            context.shutdown()
            exit(1)
        }
        context.shutdown()
        logger.info("stopped")
        exit(0)
    }

    static func usage(name: String, summary: String) -> String {
        """
        \(name): \(summary)

        Usage: \(name) [--config FILE] [--check-config] [--version]

        Settings come from their defaults, then the JSON config file (--config or NH_CONFIG; an
        installed executable reads /etc/nh/hub.json without either), then NH_* environment
        variables, such as NH_DATA_DIR and NH_REGISTRY_REQUESTS.
        Exit codes: 0 after SIGINT or SIGTERM, 1 on a runtime failure, 2 on bad arguments or config.
        """
    }

    static func fail(_ name: String, _ message: String) -> Never {
        StandardStream.write(Data("\(name): \(message)\n".utf8))
        exit(2)
    }
}
