import DeliveryCore
import Foundation
import Postgres
import Worker

/// `pushizo-worker pause | resume | cancel | retry`: the operator commands (docs/operations.md, "Operator
/// commands"). Each runs as the schema owner (`PUSHIZO_MIGRATE_DATABASE_URL` when set, else
/// `PUSHIZO_DATABASE_URL`), changes what it must in one transaction with its audit row (`operator_actions`), is
/// safe to run twice, and prints one line (or `--json`). Exit 0 done, 1 refused or the database failed, 2 usage,
/// 78 a bad setting.
enum OperatorCommand {
    static let keys: [ConfigurationKey] = [.databaseURL, .databasePooler, .migrateDatabaseURL]

    static let usage = """
        usage: pushizo-worker pause  (--app ID [--provider apns|fcm|webpush] | --fleet) [--until TIME] [--reason TEXT] [--json]
               pushizo-worker resume (--app ID [--provider apns|fcm|webpush] | --fleet) [--reason TEXT] [--json]
               pushizo-worker cancel --notification ID [--reason TEXT] [--json]
               pushizo-worker retry  --notification ID [--reason R ...] [--since TIME] [--note TEXT] [--json]
        """

    /// The command's own flags, taken out before the settings are read.
    struct Flags {
        var app: String?
        var provider: String?
        var fleet = false
        var until: String?
        var reasons: [String] = []
        var note: String?
        var notification: String?
        var since: String?
        var json = false
        var rest: [String] = []

        init(_ arguments: [String]) throws {
            var index = 0
            func value(_ flag: String) throws -> String {
                index += 1
                guard index < arguments.count else { throw UsageError("\(flag) needs a value") }
                return arguments[index]
            }
            while index < arguments.count {
                let argument = arguments[index]
                switch argument {
                case "--app": app = try value(argument)
                case "--provider": provider = try value(argument)
                case "--fleet": fleet = true
                case "--until": until = try value(argument)
                case "--reason": reasons.append(try value(argument))
                case "--note": note = try value(argument)
                case "--notification": notification = try value(argument)
                case "--since": since = try value(argument)
                case "--json": json = true
                default: rest.append(argument)
                }
                index += 1
            }
        }
    }

    struct UsageError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    static func main(verb: String, environment: [String: String], arguments: [String]) throws {
        let flags: Flags
        do {
            flags = try Flags(arguments)
        } catch {
            fail(verb, "\(error)\n\(usage)", status: 2)
        }
        let reader = try ConfigurationReader(environment: environment, arguments: flags.rest, keys: keys)
        // The schema owner's connection when set (the commands change the owner's tables), else the worker's.
        let key: ConfigurationKey = reader.string(.migrateDatabaseURL) != nil ? .migrateDatabaseURL : .databaseURL
        let databaseURL = try reader.requiredConnectionString(key)
        let route = try DatabaseRoute(reader, databaseURL: databaseURL)
        let outcome: OperatorOutcome
        do {
            let connection = try PostgresConnection(
                connectionString: databaseURL, applicationName: "pushizo-worker-\(verb)",
                poolerMode: PostgresPoolerMode(route.poolerMode))
            defer { connection.close() }
            outcome = try run(verb, flags, on: connection)
        } catch let error as UsageError {
            fail(verb, "\(error)\n\(usage)", status: 2)
        } catch let error as OperatorError {
            fail(verb, "\(error)", status: 1)
        } catch var error as PostgresError where error.sqlState == "42501" {
            let advice = "operator commands run as the schema owner: set PUSHIZO_MIGRATE_DATABASE_URL or --database-url to it"
            error.hint = error.hint.map { "\($0); \(advice)" } ?? advice
            fail(verb, "\(error)", status: 1)
        } catch let error as PostgresError {
            // A refusal only the operator can fix (a bad password, no such database or role): 78 naming the key.
            if let refusal = ConfigurationError(refusal: error, key: key) { throw refusal }
            fail(verb, "\(error)", status: 1)
        } catch {
            fail(verb, "\(error)", status: 1)
        }
        print(flags.json ? outcome.json : outcome.summary)
    }

    static func run(_ verb: String, _ flags: Flags, on connection: PostgresConnection) throws -> OperatorOutcome {
        switch verb {
        case "pause", "resume":
            let target = try target(flags)
            if flags.notification != nil || flags.since != nil { throw UsageError("\(verb) takes no --notification or --since") }
            if flags.reasons.count > 1 { throw UsageError("--reason once") }
            let note = flags.note ?? flags.reasons.first
            if verb == "resume" {
                if flags.until != nil { throw UsageError("resume takes no --until") }
                return try OperatorPauses.resume(target, note: note, on: connection)
            }
            let until = try flags.until.map { try instant($0, on: connection, flag: "--until", ago: false) }
            return try OperatorPauses.pause(target, until: until, note: note, on: connection)
        case "cancel":
            let id = try notification(flags)
            if flags.reasons.count > 1 { throw UsageError("--reason once") }
            return try OperatorCancel.cancel(notification: id, note: flags.note ?? flags.reasons.first, on: connection)
        default:
            let id = try notification(flags)
            let since = try flags.since.map { try instant($0, on: connection, flag: "--since", ago: true) }
            return try OperatorRetry.retry(
                notification: id, reasons: flags.reasons, since: since, note: flags.note, on: connection)
        }
    }

    static func target(_ flags: Flags) throws -> OperatorTarget {
        if flags.fleet {
            if flags.app != nil || flags.provider != nil { throw UsageError("--fleet takes no --app or --provider") }
            return .fleet
        }
        guard let appText = flags.app else { throw UsageError("--app ID or --fleet is required") }
        guard let app = UUID(uuidString: appText) else { throw UsageError("--app \(appText) is not a UUID") }
        guard let providerText = flags.provider else { return .app(app) }
        guard let provider = Provider(rawValue: providerText) else {
            throw UsageError("--provider \(providerText) is not apns, fcm or webpush")
        }
        return .channel(app: app, provider: provider)
    }

    static func notification(_ flags: Flags) throws -> UUID {
        if flags.app != nil || flags.provider != nil || flags.fleet || flags.until != nil {
            throw UsageError("takes --notification, not --app, --provider, --fleet or --until")
        }
        guard let text = flags.notification else { throw UsageError("--notification ID is required") }
        guard let id = UUID(uuidString: text) else { throw UsageError("--notification \(text) is not a UUID") }
        return id
    }

    /// An instant as PostgreSQL reads a `timestamptz` (`2026-12-07 18:00:00+00`, `infinity`), or `now()` plus an
    /// `interval` (`2h`, `30 minutes`), minus it when `ago` (`--since 1h`: an hour ago).
    static func instant(_ text: String, on connection: PostgresConnection, flag: String, ago: Bool) throws -> Date {
        if let row = try? connection.query("SELECT $1::text::timestamptz AS t", [text]).first {
            return try row.decode(Date.self, "t")
        }
        if let row = try? connection.query("SELECT now() \(ago ? "-" : "+") $1::text::interval AS t", [text]).first {
            return try row.decode(Date.self, "t")
        }
        throw UsageError("\(flag) \(text) is neither a time (2026-12-07 18:00:00+00) nor a duration (2h, 30 minutes)")
    }

    static func fail(_ verb: String, _ message: String, status: Int32) -> Never {
        let line = "\(message)".split(whereSeparator: \.isNewline).joined(separator: "\n")
        FileHandle.standardError.write(Data("pushizo-worker \(verb): \(TerminalText.sanitized(line))\n".utf8))
        exit(status)
    }
}
