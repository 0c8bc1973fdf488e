import DeliveryCore
import Foundation
import Postgres
import Worker

/// `pushizo-worker pause | resume | cancel | retry`: the operator commands (docs/operations.md, "Operator
/// commands"). Each runs as the schema owner (`PUSHIZO_MIGRATE_DATABASE_URL` when set, else
/// `PUSHIZO_DATABASE_URL`), changes what it must in one transaction with its audit row (`operator_actions`), is
/// safe to run twice, and prints one line (or `--json`). Exit 0 done, 1 refused or the database failed, 2 usage
/// (docs/operations.md, "Exit statuses"), 78 a bad setting or a refusal only an operator can fix (a role that is not
/// the schema owner, `42501`; a schema that lacks a migration this build was made with, naming it).
enum OperatorCommand {
    static let keys: [ConfigurationKey] = [.databaseURL, .databasePooler, .migrateDatabaseURL]

    static let usage = """
        usage: pushizo-worker pause  (--app ID [--provider apns|fcm|webpush] | --fleet) [--until TIME] [--note TEXT] [--json]
               pushizo-worker resume (--app ID [--provider apns|fcm|webpush] | --fleet) [--note TEXT] [--json]
               pushizo-worker cancel --notification ID [--note TEXT] [--json]
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

    static func main(verb: String, environment: [String: String], arguments: [String]) throws {
        let flags: Flags
        let reasons: [DeliveryReason]
        do {
            flags = try Flags(arguments)
            // `retry`'s --reason filters by failure reason; the other commands' is their --note.
            reasons = verb == "retry" ? try flags.reasons.map(Self.failureReason) : []
        } catch {
            fail(verb, error, usage: true, status: 2)
        }
        let reader: ConfigurationReader
        do {
            reader = try ConfigurationReader(environment: environment, arguments: flags.rest, keys: keys)
        } catch let error as UsageError {
            fail(verb, error, usage: true, status: 2)
        }
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
            // Before any statement: a schema without the owner's tables this build writes (operator_actions,
            // fleet_settings) is a pending migration to name, not a missing relation to report.
            try WorkerSchema.requireApplied(on: connection, key: key)
            outcome = try run(verb, flags, reasons: reasons, on: connection)
        } catch let error as UsageError {
            fail(verb, error, usage: true, status: 2)
        } catch let error as OperatorError {
            fail(verb, error, status: 1)
        } catch var error as PostgresError where error.sqlState == "42501" {
            let advice = "operator commands run as the schema owner: set PUSHIZO_MIGRATE_DATABASE_URL or --database-url to it"
            error.hint = error.hint.map { "\($0); \(advice)" } ?? advice
            throw ConfigurationError(refusal: error, key: key) ?? error
        } catch let error as PostgresError {
            // A refusal only the operator can fix (a bad password, no such database or role): 78 naming the key.
            throw ConfigurationError(refusal: error, key: key) ?? error
        }
        print(flags.json ? outcome.json : outcome.summary)
    }

    /// A `--reason` of `retry`: a documented reason (``DeliveryReason/documented``) or `http_<status>`, named in any
    /// case, with or without its underscores (`Unavailable`, `BadDeviceToken`, `max_attempts`).
    /// - Throws: ``UsageError`` listing the reasons for any other text.
    static func failureReason(_ text: String) throws -> DeliveryReason {
        if let reason = DeliveryReason(named: text) { return reason }
        throw UsageError(
            "--reason \(text) is not a failure reason; one of: http_<status>, "
                + DeliveryReason.documented.map(\.rawValue).sorted().joined(separator: ", "))
    }

    static func run(
        _ verb: String, _ flags: Flags, reasons: [DeliveryReason], on connection: PostgresConnection
    ) throws -> OperatorOutcome {
        switch verb {
        case "pause", "resume":
            let target = try target(flags)
            if flags.notification != nil || flags.since != nil { throw UsageError("\(verb) takes no --notification or --since") }
            let note = try Self.note(flags)
            if verb == "resume" {
                if flags.until != nil { throw UsageError("resume takes no --until") }
                return try OperatorPauses.resume(target, note: note, on: connection)
            }
            let until = try flags.until.map { try instant($0, on: connection, flag: "--until", ago: false) }
            return try OperatorPauses.pause(target, until: until, note: note, on: connection)
        case "cancel":
            let id = try notification(flags)
            return try OperatorCancel.cancel(notification: id, note: try Self.note(flags), on: connection)
        default:
            let id = try notification(flags)
            let since = try flags.since.map { try instant($0, on: connection, flag: "--since", ago: true) }
            return try OperatorRetry.retry(
                notification: id, reasons: reasons.map(\.rawValue), since: since, note: flags.note, on: connection)
        }
    }

    /// The operator's text of `pause`, `resume` and `cancel`: `--note`, or `--reason` (its older spelling there),
    /// once.
    static func note(_ flags: Flags) throws -> String? {
        if flags.note != nil && !flags.reasons.isEmpty { throw UsageError("--note and --reason are the same text: give one") }
        if flags.reasons.count > 1 { throw UsageError("--reason once") }
        return flags.note ?? flags.reasons.first
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
    /// `interval` (`2h`, `30 minutes`), minus it when `ago` (`--since 1h`: an hour ago). An instant to come
    /// (`--until`, not `ago`) must be after `now()`: `--until -5m` or a time passed is a usage error. An instant
    /// passed (`--since`, `ago`) must be at or before `now()`: `--since -1h` or a time to come would match no
    /// failure and is a usage error too.
    static func instant(_ text: String, on connection: PostgresConnection, flag: String, ago: Bool) throws -> Date {
        let parsed =
            (try? connection.query("SELECT $1::text::timestamptz AS t, $1::text::timestamptz <= now() AS past", [text]).first)
            ?? (try? connection.query(
                "SELECT now() \(ago ? "-" : "+") $1::text::interval AS t, now() \(ago ? "-" : "+") $1::text::interval <= now() AS past",
                [text]).first)
        guard let row = parsed else {
            throw UsageError("\(flag) \(text) is neither a time (2026-12-07 18:00:00+00) nor a duration (2h, 30 minutes)")
        }
        let past = try row.decode(Bool.self, "past")
        if !ago, past { throw UsageError("\(flag) \(text) is not in the future") }
        if ago, !past { throw UsageError("\(flag) \(text) is not in the past") }
        return try row.decode(Date.self, "t")
    }

    /// Prints `error` (and the usage after a usage error) on stderr and exits with `status`.
    static func fail(_ verb: String, _ error: any Error, usage: Bool = false, status: Int32) -> Never {
        let lines = TerminalError.lines(error) + (usage ? Self.usage.split(separator: "\n").map(String.init) : [])
        FileHandle.standardError.write(Data((TerminalError.text(lines, prefix: "pushizo-worker \(verb): ") + "\n").utf8))
        exit(status)
    }
}
