/// A configuration problem found at start-up. The message always names the offending key (the environment
/// variable, e.g. `PUSHIZO_CONCURRENCY`, and its flag, e.g. `--concurrency`) and never echoes a secret value.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    /// The environment-variable name of the offending key, e.g. `PUSHIZO_DATABASE_URL`.
    public var key: String
    /// What is wrong, in one sentence.
    public var problem: String

    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String {
        "configuration key \(key) (flag \(ConfigurationKey.flagName(forEnvironmentName: key))): \(problem)"
    }
}
