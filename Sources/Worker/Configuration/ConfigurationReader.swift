/// Merges `PUSHIZO_*` environment variables with command-line flags (flags win) and parses typed values.
///
/// Unknown `PUSHIZO_*` variables and unknown flags are errors naming them, so a typo never silently falls
/// back to a default. Three prefixes are reserved for the repository's own scripts and never read:
/// ``reservedPrefixes`` (`PUSHIZO_TEST_*` for the test suite, `PUSHIZO_BENCH_*` for `make bench`,
/// `PUSHIZO_DEMO_*` for `make demo`). Flags take `--name value` or `--name=value`; a boolean flag alone means `true`.
public struct ConfigurationReader: Sendable {
    private var values: [String: String]

    /// Environment prefixes the daemon ignores: the test suite's (`scripts/run-tests.sh`), the benchmark's
    /// (`scripts/bench.sh`) and the demo's (`scripts/demo.sh`) knobs, which stay in the environment of the worker
    /// those scripts start, or of a shell that set them for one.
    public static let reservedPrefixes = ["PUSHIZO_TEST_", "PUSHIZO_BENCH_", "PUSHIZO_DEMO_"]

    /// - Parameters:
    ///   - environment: the process environment (only `PUSHIZO_*` entries are read).
    ///   - arguments: the command's arguments after the verb.
    ///   - keys: the keys this command accepts as flags.
    ///   - booleanKeys: more keys whose flag may stand alone (meaning `true`), besides those of `keys` declared
    ///     ``ConfigurationValue/flag(default:)``.
    /// - Throws: ``ConfigurationError`` for an unknown variable; ``UsageError`` for an argument that is no flag, an
    ///   unknown flag or a flag missing its value.
    public init(
        environment: [String: String], arguments: [String], keys: [ConfigurationKey],
        booleanKeys: Set<String> = []
    ) throws {
        if let unknown = Self.unknownVariables(in: environment).first {
            throw ConfigurationError(key: unknown, problem: Self.unknownKeyProblem)
        }
        var values: [String: String] = [:]
        for (name, value) in environment
        where name.hasPrefix("PUSHIZO_") && !Self.reservedPrefixes.contains(where: { name.hasPrefix($0) }) {
            values[name] = value
        }
        let accepted = Set(keys.map(\.name))
        let booleanKeys = booleanKeys.union(keys.filter { if case .flag = $0.value { true } else { false } }.map(\.name))
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--"), argument.count > 2 else {
                throw UsageError("unexpected argument \"\(argument)\"; flags look like --name value")
            }
            var flag = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            let name = ConfigurationKey.environmentName(forFlag: flag)
            guard accepted.contains(name) else {
                throw UsageError("unknown flag \(flag) for this command (see `pushizo-worker help`)")
            }
            if let inlineValue {
                values[name] = inlineValue
            } else if booleanKeys.contains(name),
                index + 1 >= arguments.count || arguments[index + 1].hasPrefix("--")
            {
                values[name] = "true"
            } else {
                guard index + 1 < arguments.count else {
                    throw UsageError("flag \(flag) needs a value")
                }
                index += 1
                values[name] = arguments[index]
            }
            index += 1
        }
        self.values = values
    }

    /// What is wrong with a variable ``unknownVariables(in:)`` lists.
    public static let unknownKeyProblem = "unknown key (see `pushizo-worker help`)"

    /// `PUSHIZO_*` names in `environment` that are neither a known key nor under a reserved prefix: what
    /// ``init(environment:arguments:keys:booleanKeys:)`` refuses (the first of them), all of them, sorted.
    public static func unknownVariables(in environment: [String: String]) -> [String] {
        let known = Set(ConfigurationKey.all.map(\.name))
        return environment.keys.filter { name in
            name.hasPrefix("PUSHIZO_") && !known.contains(name) && !reservedPrefixes.contains(where: { name.hasPrefix($0) })
        }.sorted()
    }

    /// Whether `name` (an environment-variable name) was set, by the environment or a flag.
    public func isSet(_ name: String) -> Bool { values[name] != nil }

    /// The same settings without `name` (an environment-variable name): that key then takes its default.
    /// `check` uses it to go on past a bad value and report the next.
    public func removing(_ name: String) -> ConfigurationReader {
        var copy = self
        copy.values[name] = nil
        return copy
    }

    /// The same settings with `name` set to `value`: `check` gives a missing required key a stand-in, to go on
    /// and report the next problem.
    public func setting(_ name: String, to value: String) -> ConfigurationReader {
        var copy = self
        copy.values[name] = value
        return copy
    }

    /// The raw text set for `key`, if any (environment or flag).
    public func raw(_ key: ConfigurationKey) -> String? {
        values[key.name]
    }

    /// Text value; empty text counts as unset.
    public func string(_ key: ConfigurationKey) -> String? {
        guard let value = values[key.name], !value.isEmpty else { return nil }
        return value
    }

    /// A text value, or the key's declared default (``ConfigurationValue/text(default:)``) when unset.
    public func text(_ key: ConfigurationKey) -> String? {
        guard let value = string(key) else {
            if case .text(let fallback) = key.value { return fallback }
            return nil
        }
        return value
    }

    /// A required text value.
    /// - Throws: ``ConfigurationError`` naming the key when it is unset.
    public func requiredString(_ key: ConfigurationKey) throws -> String {
        guard let value = string(key) else {
            throw ConfigurationError(key: key.name, problem: "is required")
        }
        return value
    }

    /// A whole number in the key's range, or its default when unset (`derived` when the default follows from
    /// other keys, ``ConfigurationKey/derivedDefault``).
    /// - Precondition: the key is declared ``ConfigurationValue/wholeNumber(default:in:)`` with a default or `derived`.
    /// - Throws: ``ConfigurationError`` naming the key for non-numbers or values out of range.
    public func int(_ key: ConfigurationKey, default derived: Int? = nil) throws -> Int {
        guard case .wholeNumber(let declared, let range) = key.value, let fallback = derived ?? declared else {
            preconditionFailure("\(key.name) is not declared a whole number with a default")
        }
        guard let text = string(key) else { return fallback }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
            throw ConfigurationError(
                key: key.name,
                problem: "\(describe(text, key)) is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// A duration (see ``DurationText``: plain seconds such as `30` or `0.25`, or `500ms`, `30s`, `5m`, `2h`)
    /// in the key's range, or its default when unset (`derived` when the default follows from other keys). Every
    /// duration setting that cannot be turned off is read here.
    /// - Precondition: the key is declared ``ConfigurationValue/duration(default:in:off:)`` with a default or `derived`.
    /// - Throws: ``ConfigurationError`` naming the key for text that is not a duration or lies outside the range.
    public func duration(_ key: ConfigurationKey, default derived: Duration? = nil) throws -> Duration {
        guard case .duration(let declared, let range, _) = key.value, let fallback = derived ?? declared else {
            preconditionFailure("\(key.name) is not declared a duration with a default")
        }
        guard let text = string(key) else { return fallback }
        guard let value = DurationText.parse(text), range.contains(value) else {
            throw ConfigurationError(
                key: key.name,
                problem: "\(describe(text, key)) is not a duration in \(DurationText.describe(range.lowerBound))..."
                    + "\(DurationText.describe(range.upperBound)) (seconds, or a number with ms, s, m, h or d: 500ms, 30s, 5m, 30d)")
        }
        return value
    }

    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`), or the key's default when unset.
    /// - Precondition: the key is declared ``ConfigurationValue/flag(default:)``.
    /// - Throws: ``ConfigurationError`` naming the key for anything else.
    public func bool(_ key: ConfigurationKey) throws -> Bool {
        guard case .flag(let fallback) = key.value else { preconditionFailure("\(key.name) is not declared a flag") }
        guard let text = string(key) else { return fallback }
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default:
            throw ConfigurationError(key: key.name, problem: "\(describe(text, key)) is not true or false")
        }
    }

    /// One of the key's choices (lower-cased), or its default when unset.
    /// - Precondition: the key is declared ``ConfigurationValue/choice(default:among:)``.
    /// - Throws: ``ConfigurationError`` naming the key and the choices.
    public func choice(_ key: ConfigurationKey) throws -> String {
        guard case .choice(let fallback, let choices) = key.value else {
            preconditionFailure("\(key.name) is not declared a choice")
        }
        guard let text = string(key) else { return fallback }
        guard choices.contains(text.lowercased()) else {
            throw ConfigurationError(
                key: key.name, problem: "\(describe(text, key)) is not one of \(choices.joined(separator: ", "))")
        }
        return text.lowercased()
    }

    /// The key's comma-separated choices (trimmed, lower-cased, in the order written), or its default when unset.
    /// - Precondition: the key is declared ``ConfigurationValue/list(default:among:)``.
    /// - Throws: ``ConfigurationError`` naming the key for an item that is not a choice, or a list naming none.
    public func list(_ key: ConfigurationKey) throws -> [String] {
        guard case .list(let fallback, let choices) = key.value else {
            preconditionFailure("\(key.name) is not declared a list")
        }
        guard let text = string(key) else { return fallback }
        var items: [String] = []
        for item in text.split(separator: ",") {
            let trimmed = item.trimmingCharacters(in: .whitespaces).lowercased()
            guard choices.contains(trimmed) else {
                throw ConfigurationError(
                    key: key.name, problem: "\"\(trimmed)\" is not one of \(choices.joined(separator: ", "))")
            }
            items.append(trimmed)
        }
        guard !items.isEmpty else {
            throw ConfigurationError(key: key.name, problem: "names none of \(choices.joined(separator: ", "))")
        }
        return items
    }

    private func describe(_ text: String, _ key: ConfigurationKey) -> String {
        key.isSecret ? "the value" : "\"\(text)\""
    }
}

import Foundation
