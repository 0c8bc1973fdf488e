/// A command line the command cannot take: an argument that is no flag, a flag the command does not know or one
/// missing its value, or a bad value of a command's own flag (`status --app`, `pause --until`, `retry --reason`).
/// The commands exit 2 on it (the shells' and getopt's usage status), where a bad value of a setting
/// (``ConfigurationError``) exits 78: docs/operations.md, "Exit statuses".
public struct UsageError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, naming the flag as typed.
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}
