import Foundation
import Worker

/// `status --app ID`: every figure narrowed to one app (docs/status.md).
enum StatusAppFlag {
    /// The app of `--app ID` (nil without it) and the other arguments.
    /// - Throws: ``UsageError`` (exit 2) for a missing value or one that is not a UUID.
    static func split(_ arguments: [String]) throws -> (app: UUID?, rest: [String]) {
        guard let index = arguments.firstIndex(of: "--app") else { return (nil, arguments) }
        guard index + 1 < arguments.count, let app = UUID(uuidString: arguments[index + 1]) else {
            throw UsageError("--app needs an app id (a UUID)")
        }
        var rest = arguments
        rest.removeSubrange(index...(index + 1))
        return (app, rest)
    }
}
