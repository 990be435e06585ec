// swift-tools-version:6.0
import PackageDescription

/// Libraries live under `Modules/`, executables under `Services/`, tests under `Tests/`.
func module(_ name: String, dependencies: [Target.Dependency] = [], exclude: [String] = []) -> Target {
    .target(name: name, dependencies: dependencies, path: "Modules/\(name)", exclude: exclude)
}

/// A service is a library, NH<Directory> (a module named after its folder, "Dispatch", would shadow
/// the system module of that name), with its entry point `<Directory>Main.main`, and an executable
/// in `Services/Executables/<product>` that only calls it. `nh-services` links them all into one.
func service(_ directory: String, product: String, dependencies: [Target.Dependency]) -> [Target] {
    [
        .target(
            name: "NH\(directory)", dependencies: dependencies, path: "Services/\(directory)",
            resources: (webPages[directory] ?? []).map { .copy($0) }),
        .executableTarget(name: "\(directory)Executable", dependencies: [.target(name: "NH\(directory)")], path: "Services/Executables/\(product)"),
    ]
}

/// Files served as they are: the gateway's web console and inbox (HTML, CSS and JavaScript, no build step).
let webPages: [String: [String]] = ["Gateway": ["Web"]]

func tests(_ name: String, dependencies: [Target.Dependency], exclude: [String] = []) -> Target {
    .testTarget(name: name, dependencies: dependencies, path: "Tests/\(name)", exclude: exclude)
}

let serviceDependencies: [Target.Dependency] = ["Auth", "Bus", "HubProtocol", "Storage", "ServiceKit", "Tags", "Templates"]

/// Extra modules per executable, beside the shared ones.
let extraDependencies: [String: [Target.Dependency]] = [
    "Gateway": ["HTTPServer", "Push", "Registrations"], "Registry": ["Postgres", "StoreEngines", "Registrations"], "Publish": ["Postgres", "StoreEngines"], "Sync": ["Postgres", "StoreEngines"],
    "Dispatch": ["DispatchCore", "Push", "Postgres", "StoreEngines"], "Agent": ["DBus", "DispatchCore"],
    "Bench": ["CLibZMQ", "CMosquitto", "DispatchCore", "Postgres", "Push", "NHPublish"],
]

let executables: [(product: String, directory: String)] = [
    ("nh-registry", "Registry"),
    ("nh-publish", "Publish"),
    ("nh-dispatch", "Dispatch"),
    ("nh-sync", "Sync"),
    ("nh-agent", "Agent"),
    ("nh-gateway", "Gateway"),
    ("nhctl", "Ctl"),
]

/// The services and nhctl in one executable that dispatches on the name it is started as: what the
/// `notification-hub` package installs, with a link per service.
let multicall = ["Registry", "Publish", "Dispatch", "Sync", "Gateway", "Ctl"]

let package = Package(
    name: "NotificationHub",
    platforms: [.macOS(.v14)],
    products: executables.map { .executable(name: $0.product, targets: ["\($0.directory)Executable"]) }
        + [.executable(name: "nh-services", targets: ["ServicesExecutable"]), .executable(name: "nh-bench", targets: ["NHBench"])],
    targets: [
        .systemLibrary(
            name: "CLibZMQ", path: "Modules/CLibZMQ", pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"])]),
        .systemLibrary(
            name: "CSQLite", path: "Modules/CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "COpenSSL", path: "Modules/COpenSSL", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CMosquitto", path: "Modules/CMosquitto", pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", path: "Modules/CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(
            name: "CCurl", path: "Modules/CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CSystemdBus", path: "Modules/CSystemdBus", pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(
            name: "CLibPQ", path: "Modules/CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]),
        module("HTTPServer", dependencies: ["CMicroHTTPD"]),
        module("Bus", dependencies: ["CLibZMQ"]),
        module("DBus", dependencies: ["CSystemdBus"]),
        module("Auth", dependencies: ["COpenSSL", "HubProtocol"]),
        module("HubProtocol", exclude: ["README.md"]),
        module("Storage", dependencies: ["CSQLite", "HubProtocol"]),
        module("Postgres", dependencies: ["CLibPQ", "HubProtocol", "Storage"]),
        module("StoreEngines", dependencies: ["Storage", "Postgres"]),
        module("Tags"),
        module("Templates"),
        module("DispatchCore", dependencies: ["HubProtocol", "Tags", "Templates"]),
        module("Registrations", dependencies: ["HubProtocol"]),
        module("Push", dependencies: ["CCurl", "COpenSSL", "Auth", "HubProtocol", "DispatchCore"]),
        .target(name: "CBuildInfo", path: "Modules/CBuildInfo"),
        module("ServiceKit", dependencies: ["Bus", "HubProtocol", "Storage", "Auth", "CBuildInfo"]),
    ]
        + executables.flatMap {
            service(
                $0.directory, product: $0.product,
                dependencies: serviceDependencies + (extraDependencies[$0.directory] ?? []))
        }
        + [
            .executableTarget(
                name: "ServicesExecutable", dependencies: multicall.map { .target(name: "NH\($0)") } + ["ServiceKit"],
                path: "Services/Executables/nh-services"),
            .executableTarget(
                name: "NHBench", dependencies: serviceDependencies + (extraDependencies["Bench"] ?? []), path: "Services/Bench"),
        ]
        + [
            .target(name: "TestSupport", dependencies: ["ServiceKit", "HubProtocol", "Auth", "Storage"], path: "Tests/TestSupport"),
            tests("BusTests", dependencies: ["Bus"]),
            tests("HTTPServerTests", dependencies: ["HTTPServer"]),
            tests("DBusTests", dependencies: ["DBus"]),
            tests("HubProtocolTests", dependencies: ["HubProtocol"], exclude: ["Fixtures"]),
            tests("StorageTests", dependencies: ["Storage", "CSQLite", "HubProtocol", "TestSupport"]),
            tests("PostgresTests", dependencies: ["Postgres", "Storage", "HubProtocol", "TestSupport"]),
            tests("TagsTests", dependencies: ["Tags"]),
            tests("AuthTests", dependencies: ["Auth"]),
            tests("TemplatesTests", dependencies: ["Templates"]),
            tests("ParserFuzzTests", dependencies: ["Tags", "Templates"]),
            tests("PushTests", dependencies: ["Push", "Auth"]),
            tests("ServiceKitTests", dependencies: ["ServiceKit", "HubProtocol", "Storage"]),
            tests("DispatchCoreTests", dependencies: ["DispatchCore", "HubProtocol"]),
            tests("RegistryTests", dependencies: ["NHRegistry", "Registrations", "HubProtocol", "Storage", "Postgres", "ServiceKit", "Auth", "Bus", "TestSupport"]),
            tests("PublishTests", dependencies: ["NHPublish", "HubProtocol", "Storage", "Postgres", "ServiceKit", "Auth", "TestSupport"]),
            tests("SyncTests", dependencies: ["NHSync", "HubProtocol", "Storage", "Postgres", "ServiceKit", "Auth", "TestSupport"]),
            tests("DispatchTests", dependencies: ["NHDispatch", "DispatchCore", "HubProtocol", "Push", "Storage", "Postgres", "StoreEngines", "TestSupport"]),
            tests("AgentTests", dependencies: ["NHAgent", "HubProtocol", "DBus", "Storage", "ServiceKit"]),
            tests("CtlTests", dependencies: ["NHCtl"]),
            tests("BenchTests", dependencies: ["NHBench"]),
            tests("GatewayTests", dependencies: ["NHGateway", "Registrations", "HTTPServer", "HubProtocol", "ServiceKit", "Auth", "Push"]),
            tests("EndToEndTests", dependencies: ["Auth", "Bus", "HubProtocol", "ServiceKit"]),
        ]
)
