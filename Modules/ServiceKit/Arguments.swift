/// A small command-line parser: positionals, `--name value`, `--name=value` and flags.
/// Which options take a value is declared, so `--json` cannot swallow the next word.
public struct Arguments: Sendable, Equatable {
    public private(set) var positionals: [String] = []
    public private(set) var options: [String: String] = [:]
    public private(set) var flags: Set<String> = []

    public struct Error: Swift.Error, Equatable, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// - Parameters:
    ///   - valued: option names that take a value, without dashes.
    ///   - flags: option names that take none.
    public init(_ arguments: [String], valued: Set<String>, flags known: Set<String>) throws(Error) {
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || !argument.hasPrefix("-") || argument == "-" {
                positionals.append(argument)
                continue
            }
            if argument == "--" {
                onlyPositionals = true
                continue
            }
            var name = String(argument.drop(while: { $0 == "-" }))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if name == "h" { name = "help" }
            if valued.contains(name) {
                if let inlineValue {
                    options[name] = inlineValue
                } else if index < arguments.count {
                    options[name] = arguments[index]
                    index += 1
                } else {
                    throw Error(description: "option --\(name) needs a value")
                }
            } else if known.contains(name) || name == "help" {
                if inlineValue != nil { throw Error(description: "option --\(name) takes no value") }
                flags.insert(name)
            } else {
                let all = (valued.map { "--\($0) VALUE" } + known.map { "--\($0)" }).sorted()
                throw Error(description: "unknown option --\(name); known options: \(all.joined(separator: ", "))")
            }
        }
    }

    public subscript(option name: String) -> String? { options[name] }
    public func has(_ flag: String) -> Bool { flags.contains(flag) }
}
