import DeliveryCore
import Foundation
import HTTP2
import Postgres
import Providers
import Worker

/// `pushizo-worker check`: what an operator runs before (re)starting a fleet. Exit 0 only when the
/// configuration is valid, the database answers, no migration is pending and every channel parses and has an
/// endpoint the egress policy allows; exit 78 when the schema lacks a migration this build needs or is beyond its
/// compatibility window (``WorkerSchema``). Everything printed (rows, settings, errors) goes through
/// ``TerminalText/sanitized(_:)``: no terminal escapes, no URL user info.
enum CheckCommand {
    static func main(environment: [String: String], arguments: [String]) async throws {
        do {
            try await run(environment: environment, arguments: arguments)
        } catch let error as UsageError {
            FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker check: ") + "\n").utf8))
            exit(2)
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker: ") + "\n").utf8))
            exit(78)
        } catch {
            FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker check: ") + "\n").utf8))
            exit(1)
        }
    }

    static func run(environment: [String: String], arguments: [String]) async throws {
        let (configuration, directory) = try readConfiguration(environment: environment, arguments: arguments)
        let policy = configuration.egressPolicy
        output("configuration: ok (worker \(configuration.workerID), concurrency \(configuration.concurrency))")
        if policy.allowsPrivateNetworks {
            output("egress: PUSHIZO_ALLOW_PRIVATE_NETWORKS=true: private addresses and http:// overrides are allowed (tests and emulators only)")
        }
        let migrator = try PostgresMigrator(directory: directory)
        let route = configuration.databaseRoute
        let database = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: 1, poolerMode: PostgresPoolerMode(route.poolerMode))
        let outcome = await capture { try await database.withConnection { connection in
            var lines: [String] = []
            try route.verify(connection)
            try WorkerRights.verify(on: connection)
            let version = try connection.query("SHOW server_version")[0]["server_version"] ?? "?"
            lines.append("database: ok (PostgreSQL \(version); \(route.summary))")
            // This build's own migrations decide (as in `run`); the directory's files only say what `migrate` would
            // add, and a newer release's migrations already applied are within the compatibility window.
            let newer: [String]
            do {
                newer = try WorkerSchema.verify(on: connection)
            } catch let refusal as ConfigurationError {
                lines.append("migrations: REFUSED: \(refusal.problem)")
                return lines
            }
            let applied = Set(try SchemaWindow.applied(on: connection).map(\.version))
            let pending = migrator.migrations.filter { !applied.contains($0.version) }
            if !pending.isEmpty {
                lines.append("migrations: \(pending.count) pending (\(pending.map(\.fileName).joined(separator: ", "))); run `pushizo-worker migrate`")
                return lines
            }
            lines.append(
                newer.isEmpty
                    ? "migrations: up to date"
                    : "migrations: up to date for this worker; newer ones applied, within the compatibility window: \(newer.joined(separator: ", "))")
            let channels = try connection.query(
                """
                SELECT app_id, provider, settings::text AS settings, endpoint, paused_until, paused_reason
                FROM app_channels ORDER BY app_id, provider
                """)
            var problems = 0
            let resolved = resolveOverrideHosts(channels, policy: policy)
            for channel in channels {
                let app = channel["app_id"] ?? "?"
                // The column's text becomes a `Provider` here, at the edge; a value the worker has no sender for is
                // reported as such.
                let providerText = channel["provider"] ?? "?"
                let provider = Provider(rawValue: providerText)
                var line = "channel \(app) \(providerText)"
                var channelName = line
                var endpointProblem: String?
                var invalidSettings = false
                // An FCM or Huawei `token_uri`: the channel's choice, judged as the worker's connection would judge it.
                func checkTokenURI(_ tokenURI: String) {
                    do throws(ChannelEndpointError) {
                        let origin = try ChannelEndpoint.origin(tokenURI, field: "token_uri", policy: policy)
                        switch resolvedProblem(origin, field: "token_uri", policy: policy, resolved: resolved) {
                        case .forbidden(let message)?, .unjudged(let message)?: endpointProblem = endpointProblem ?? message
                        case .unresolved(let message)?: line += " (\(message))"
                        case nil: break
                        }
                    } catch {
                        endpointProblem = endpointProblem ?? error.message
                    }
                }
                if let endpoint = channel["endpoint"] {
                    line += " endpoint=\(endpoint)"
                    channelName = line
                    if provider == .apns || provider == .fcm || provider == .huawei {
                        do throws(ChannelEndpointError) {
                            let origin = try ChannelEndpoint.origin(endpoint, policy: policy)
                            switch resolvedProblem(origin, field: "endpoint", policy: policy, resolved: resolved) {
                            case .forbidden(let message)?, .unjudged(let message)?: endpointProblem = message
                            case .unresolved(let message)?: line += " (\(message))"
                            case nil: break
                            }
                        } catch {
                            endpointProblem = error.message
                        }
                    }
                }
                if provider == .apns, let settings = try? JSONValue(parsing: channel["settings"] ?? "{}"),
                    APNsCertificateCredentials.isCertificateSettings(settings)
                {
                    do {
                        let credentials = try APNsCertificateCredentials(settings: settings)
                        line += ": ok (\(CertificateReport.describe(credentials, now: Date())))"
                        if let warning = CertificateReport.warning(credentials, now: Date()) {
                            line += " \(warning)"
                            if credentials.daysLeft(now: Date()) < 0 { invalidSettings = true }
                        }
                    } catch {
                        invalidSettings = true
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == .apns {
                    do {
                        let credentials = try APNsCredentials(settings: try JSONValue(parsing: channel["settings"] ?? "{}"))
                        line += ": ok (team \(credentials.teamID), key \(credentials.keyID), topic \(credentials.topic))"
                    } catch {
                        invalidSettings = true
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == .webpush {
                    do {
                        _ = try WebPushChannelSettings(settings: try JSONValue(parsing: channel["settings"] ?? "{}"))
                        line += ": ok (VAPID key and subject)"
                    } catch {
                        invalidSettings = true
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == .fcm {
                    do {
                        let settings = try FCMChannelSettings(settingsJSON: channel["settings"] ?? "{}")
                        checkTokenURI(settings.account.tokenURI)
                        line += ": ok (project \(settings.account.projectID), service account \(settings.account.clientEmail))"
                    } catch {
                        invalidSettings = true
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else if provider == .huawei {
                    do {
                        let credentials = try HuaweiClientCredentials(settings: try JSONValue(parsing: channel["settings"] ?? "{}"))
                        checkTokenURI(credentials.tokenURI)
                        line += ": ok (app \(credentials.appID), client \(credentials.clientID))"
                    } catch {
                        invalidSettings = true
                        line += ": INVALID SETTINGS: \(error)"
                    }
                } else {
                    line += ": unknown provider"
                }
                if invalidSettings || endpointProblem != nil { problems += 1 }
                if let paused = channel["paused_until"] { line += " [paused until \(paused): \(channel["paused_reason"] ?? "")]" }
                lines.append(line)
                // One verdict a line: the settings' above, the endpoint's on a line of its own.
                if let endpointProblem { lines.append("\(channelName): INVALID ENDPOINT: \(endpointProblem)") }
            }
            if channels.isEmpty { lines.append("channels: none configured") }
            if problems > 0 { lines.append("FAILED: \(TerminalWords.count(problems, "channel", "channels")) with invalid settings or endpoints") }
            return lines
        } }
        await database.shutdown()
        guard case .success(var report) = outcome else {
            if case .failure(let error) = outcome {
                // A refusal that needs the operator (a bad password, no such database, a missing right) is a setting's
                // problem, as in `run`: exit 78 (EX_CONFIG).
                let refusal = ConfigurationError(refusal: error, key: .databaseURL)
                print(TerminalError.text(refusal ?? error, prefix: "database: FAILED: "))
                if error is ConfigurationError || refusal != nil { exit(78) }
            }
            exit(1)
        }
        if route.poolerMode == .transaction, let listenURL = route.listenURL {
            let listen = PostgresClient(
                connectionString: listenURL, maximumConnections: 1, applicationName: "pushizo-worker-listen")
            let listenOutcome = await capture { try await listen.withConnection { try route.verify($0, listen: true) } }
            await listen.shutdown()
            if case .failure(let error) = listenOutcome {
                let refusal = ConfigurationError(refusal: error, key: .listenDatabaseURL)
                print(TerminalError.text(refusal ?? error, prefix: "listen: FAILED: "))
                exit(error is ConfigurationError || refusal != nil ? 78 : 1)
            }
            report.insert("listen: ok (PUSHIZO_LISTEN_DATABASE_URL reaches PostgreSQL directly)", at: 1)
        }
        for line in report { output(line) }
        // A schema behind this build or beyond its window is the operator's to fix, as in `run`: exit 78.
        if report.contains(where: { $0.hasPrefix("migrations: REFUSED") }) { exit(78) }
        if report.contains(where: { $0.hasPrefix("FAILED") || $0.hasPrefix("migrations: ") && $0.contains("pending") }) {
            exit(1)
        }
    }
}

/// What resolving an override's host now says, as the worker's connection would judge it: `forbidden` (a
/// channel error the worker pauses the channel for), `unresolved` (the resolver found no address: reported, not a
/// failure, as the worker only retries the connection) or `unjudged` (no answer in time: the check cannot say the
/// endpoint is allowed, so it fails).
private enum ResolvedEndpointProblem {
    case forbidden(String)
    case unresolved(String)
    case unjudged(String)
}

private func resolvedProblem(
    _ origin: HTTP2Origin, field: String, policy: EgressPolicy, resolved: [HostAndPort: Result<[IPAddress], HTTP2Error>]
) -> ResolvedEndpointProblem? {
    guard let answer = resolved[HostAndPort(host: origin.host, port: origin.port)] else { return nil }
    switch answer {
    case .success:
        return nil
    case .failure(let error) where error.code == .forbiddenAddress:
        return .forbidden("\(field) is refused: \(error.message)")
    case .failure(let error) where error.code == .connectTimeout:
        return .unjudged("\(field) host could not be checked: \(error.message)")
    case .failure(let error):
        return .unresolved("\(field) host does not resolve now: \(error.message)")
    }
}

/// The host names of every channel's endpoint override and FCM `token_uri`, each looked up once, eight at a time,
/// for as long as answers keep coming (giving up after 15 s without one), when the egress policy restricts
/// addresses. Address literals were judged with the URL; with the operator switch on every address is allowed.
private func resolveOverrideHosts(_ channels: PostgresQueryResult, policy: EgressPolicy) -> [HostAndPort: Result<[IPAddress], HTTP2Error>] {
    guard !policy.allowsPrivateNetworks else { return [:] }
    var names = Set<HostAndPort>()
    func add(_ url: String?, field: String) {
        guard let url, let origin = try? ChannelEndpoint.origin(url, field: field, policy: policy),
              case .name? = try? EgressHost(parsing: origin.host) else { return }
        names.insert(HostAndPort(host: origin.host, port: origin.port))
    }
    for channel in channels {
        let provider = channel["provider"].flatMap(Provider.init(rawValue:))
        if provider == .apns || provider == .fcm || provider == .huawei { add(channel["endpoint"], field: "endpoint") }
        if provider == .fcm {
            add((try? FCMChannelSettings(settingsJSON: channel["settings"] ?? "{}"))?.account.tokenURI, field: "token_uri")
        }
        if provider == .huawei {
            let settings = try? JSONValue(parsing: channel["settings"] ?? "{}")
            add(settings.flatMap { try? HuaweiClientCredentials(settings: $0) }?.tokenURI, field: "token_uri")
        }
    }
    return names.isEmpty ? [:] : policy.resolveChecked(names, stallTimeout: .seconds(15))
}

/// The configuration as `run` reads it, every problem reported at once: all unknown variables, then each bad
/// value, found by reading again without the key that failed (it takes its default then, or a stand-in when it is
/// required and missing), once per key at most. A bad flag ends the search.
/// - Throws: ``ConfigurationError``: the last problem, after every one was printed to standard error.
private func readConfiguration(environment: [String: String], arguments: [String]) throws -> (WorkerConfiguration, URL) {
    var problems: [ConfigurationError] = []
    func fail() -> ConfigurationError {
        for problem in problems.dropLast() {
            FileHandle.standardError.write(Data((TerminalError.text(problem, prefix: "pushizo-worker: ") + "\n").utf8))
        }
        return problems[problems.count - 1]
    }
    let unknown = ConfigurationReader.unknownVariables(in: environment)
    problems += unknown.map { ConfigurationError(key: $0, problem: ConfigurationReader.unknownKeyProblem) }
    var known = environment
    for name in unknown { known[name] = nil }
    var reader: ConfigurationReader
    do {
        reader = try ConfigurationReader(
            environment: known, arguments: arguments, keys: WorkerConfiguration.keys + [.migrationsDirectory])
    } catch let error as ConfigurationError {
        problems.append(error)
        throw fail()
    }
    for _ in 0...ConfigurationKey.all.count {
        do {
            let configuration = try WorkerConfiguration(reader)
            _ = try configuration.trustRoots()
            _ = try LoggerConfiguration.make(reader, label: "check")
            let directory = try MigrationsLocation.resolve(reader)
            if problems.isEmpty { return (configuration, directory) }
            break
        } catch let error as ConfigurationError {
            // The same key again: a rule between keys that its default breaks too; said once is enough.
            guard !problems.contains(where: { $0.key == error.key }) else { break }
            problems.append(error)
            // A bad value gives way to the default; a missing required key to a stand-in (a database URL, a
            // path: text either way), so the keys read after it are judged too.
            reader = reader.isSet(error.key) ? reader.removing(error.key) : reader.setting(error.key, to: "unset")
        }
    }
    throw fail()
}

/// One line of `check`'s report on stdout, sanitized.
private func output(_ line: String) {
    print(TerminalText.sanitized(line))
}

/// `Result(catching:)` for async work.
func capture<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}

/// How `check` reports an APNs certificate channel: the certificate's public facts and days left.
enum CertificateReport {
    /// Days left below which `check` warns (Apple push certificates live a year; renewal takes a developer).
    static let warningDays = 30

    /// `certificate <fingerprint prefix>, bundle <id>, topic <topic>, environments <...>, expires <date> (<n> days left)`.
    static func describe(_ credentials: APNsCertificateCredentials, now: Date) -> String {
        let certificate = credentials.identity.certificate
        let environments = credentials.apple.environments.isEmpty
            ? "not named" : credentials.apple.environments.map(\.rawValue).sorted().joined(separator: "+")
        let days = credentials.daysLeft(now: now)
        return "certificate \(certificate.fingerprint.prefix(16)), bundle \(credentials.apple.bundleID ?? "none"), "
            + "topic \(credentials.topic), environments \(environments), "
            + "expires \(ISO8601DateFormatter().string(from: certificate.notAfter)) (\(days) days left)"
    }

    /// `EXPIRED` past `notAfter`, `EXPIRES SOON` within ``warningDays``; nil otherwise.
    static func warning(_ credentials: APNsCertificateCredentials, now: Date) -> String? {
        let days = credentials.daysLeft(now: now)
        if credentials.identity.certificate.notAfter <= now { return "EXPIRED: renew the push certificate" }
        if days < warningDays { return "EXPIRES SOON: \(days) days left" }
        return nil
    }
}
