import DeliveryCore
import Foundation
import HTTP2
import Postgres
import Worker

/// `pushizo-worker preview [FILE]`: reads one preview document (docs/preview.md) from FILE or stdin and prints
/// the decision and the exact provider request as JSON. Contacts nothing. `PUSHIZO_ALLOW_PRIVATE_NETWORKS` applies
/// as for `run` (endpoint overrides, Web Push hosts). Exit 0 with the decision (even
/// "fail"), 2 when the document itself is malformed.
///
/// `pushizo-worker preview --notification ID --subscription ID`: the document read from the database instead
/// (``PreviewStore``, read-only, `PUSHIZO_DATABASE_URL`), for what the worker would send that device now. Exit 1
/// when either row does not exist or the database cannot be read, 78 for a setting or a refusal only an operator
/// can fix.
enum PreviewCommand {
    static let usage = """
        usage: pushizo-worker preview [FILE]  (reads stdin without FILE)
               pushizo-worker preview --notification ID --subscription ID [--database-url URL]
        """

    static func main(environment: [String: String], arguments: [String]) throws {
        let (ids, rest) = try rowFlags(arguments)
        // The worker's egress switch decides what preview accepts, so it shows what `run` would do.
        let reader = try ConfigurationReader(
            environment: environment, arguments: ids == nil ? [] : rest, keys: [.databaseURL, .databasePooler])
        let egressPolicy = EgressPolicy(allowsPrivateNetworks: try reader.bool(.allowPrivateNetworks))
        let input: JSONValue
        if let ids {
            input = try document(ids, reader: reader)
        } else {
            input = try document(fromFile: rest)
        }
        let output = try Preview.run(input, egressPolicy: egressPolicy)
        // Not JSONEncoder: it would round numbers in `data` through Double; this keeps their text.
        print(output.prettyJSONText)
    }

    /// `--notification ID --subscription ID` (both or neither) and the other arguments.
    static func rowFlags(_ arguments: [String]) throws -> (ids: (notification: UUID, subscription: UUID)?, rest: [String]) {
        var notification: UUID?
        var subscription: UUID?
        var rest: [String] = []
        var index = 0
        while index < arguments.count {
            let flag = arguments[index]
            guard flag == "--notification" || flag == "--subscription" else {
                rest.append(flag)
                index += 1
                continue
            }
            guard index + 1 < arguments.count, let id = UUID(uuidString: arguments[index + 1]) else {
                throw PreviewError("\(flag) needs an id (a UUID)\n\(usage)")
            }
            if flag == "--notification" { notification = id } else { subscription = id }
            index += 2
        }
        switch (notification, subscription) {
        case (let notification?, let subscription?): return ((notification, subscription), rest)
        case (nil, nil): return (nil, rest)
        default: throw PreviewError("--notification and --subscription go together\n\(usage)")
        }
    }

    /// The preview document read from the database, in one read-only statement.
    static func document(_ ids: (notification: UUID, subscription: UUID), reader: ConfigurationReader) throws -> JSONValue {
        let databaseURL = try reader.requiredConnectionString(.databaseURL)
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        do {
            let connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-preview",
                poolerMode: PostgresPoolerMode(route.poolerMode))
            defer { connection.close() }
            return try PreviewStore.document(notification: ids.notification, subscription: ids.subscription, on: connection)
        } catch {
            throw ConfigurationError(refusal: error, key: .databaseURL) ?? error
        }
    }

    /// The preview document of FILE (or stdin without it, or with `-`).
    /// - Throws: ``PreviewError`` naming the flag or the extra argument of a command line it cannot read, with the
    ///   usage, as ``ConfigurationReader`` names an unknown flag of the other commands.
    static func document(fromFile arguments: [String]) throws -> JSONValue {
        if let flag = arguments.first(where: { $0.hasPrefix("--") }) {
            let name = flag.split(separator: "=", maxSplits: 1).first.map(String.init) ?? flag
            let problem =
                name == "--database-url" || name == "--database-pooler"
                ? "\(name) is read only with --notification and --subscription"
                : "unknown flag \(name) for this command (see `pushizo-worker help`)"
            throw PreviewError("\(problem)\n\(usage)")
        }
        guard arguments.count <= 1 else {
            throw PreviewError("unexpected argument \"\(arguments[1])\"; preview reads one FILE\n\(usage)")
        }
        let data: Data
        if let path = arguments.first, path != "-" {
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw PreviewError("cannot read \(path)")
            }
            data = contents
        } else {
            data = FileHandle.standardInput.readDataToEndOfFile()
        }
        do {
            return try JSONValue(parsing: Array(data))
        } catch {
            throw PreviewError("the input is not JSON")
        }
    }
}
