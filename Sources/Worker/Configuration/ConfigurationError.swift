/// A configuration problem found at start-up. The message always names the offending key (the environment
/// variable, e.g. `PUSHIZO_CONCURRENCY`, and its flag, e.g. `--concurrency`) and never echoes a secret value.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    /// The environment-variable name of the offending key, e.g. `PUSHIZO_DATABASE_URL`.
    public var key: String
    /// What is wrong, in one sentence.
    public var problem: String
    /// Further lines a terminal shows indented below the problem (`detail: ...`, `hint: ...`: a database refusal's
    /// detail and hint, ``init(refusal:key:)``); the one-line ``description`` of a log keeps them after it.
    public var details: [String]

    public init(key: String, problem: String, details: [String] = []) {
        self.key = key
        self.problem = problem
        self.details = details
    }

    public var description: String {
        ([firstLine] + details.map { "(\($0))" }).joined(separator: " ")
    }

    /// The error for a person at a terminal (``TerminalError``): the key and the problem, then each of
    /// ``details`` indented by two spaces on a line of its own, as a database error's detail and hint are.
    public var terminalLines: [String] {
        [firstLine] + details.map { "  " + $0 }
    }

    private var firstLine: String {
        "configuration key \(key) (flag \(ConfigurationKey.flagName(forEnvironmentName: key))): \(problem)"
    }
}
