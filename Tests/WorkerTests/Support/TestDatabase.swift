import Foundation
import Postgres
import SocketTestSupport
import Testing

/// A fresh, migrated database per test on the PostgreSQL that `make test` starts
/// (`PUSHIZO_TEST_DATABASE_URL`), dropped afterwards.
enum TestDatabase {
    static func baseConnectionString() throws -> String {
        guard let value = ProcessInfo.processInfo.environment["PUSHIZO_TEST_DATABASE_URL"], !value.isEmpty else {
            throw PostgresError(
                code: .connectionFailed,
                message: "PUSHIZO_TEST_DATABASE_URL is not set: run the tests through `make test`")
        }
        return value
    }

    static var migrationsDirectory: URL {
        if let configured = ProcessInfo.processInfo.environment["PUSHIZO_TEST_MIGRATIONS_DIR"] {
            return URL(fileURLWithPath: configured)
        }
        // Tests/WorkerTests/Support/TestDatabase.swift -> repository root.
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("migrations")
    }

    /// Creates and migrates a fresh database, runs `body` with its connection string, drops it afterwards.
    static func withMigratedDatabase<T: Sendable>(_ body: @Sendable (String) async throws -> T) async throws -> T {
        let base = try baseConnectionString()
        let name = "w_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let url = base + " dbname=" + name
        try await onThread {
            let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
            defer { admin.close() }
            try admin.execute("CREATE DATABASE \(name)")
            let connection = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-migrate")
            defer { connection.close() }
            _ = try PostgresMigrator(directory: migrationsDirectory).migrate(on: connection)
        }
        defer {
            _ = try? onSocketThreadSync {
                let admin = try PostgresConnection(connectionString: base, applicationName: "pushizo-test-admin")
                defer { admin.close() }
                try admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            }
        }
        return try await body(url)
    }
}

/// Runs blocking code on a fresh thread, so tests never block Swift's small cooperative pool (the WorkerTests
/// spelling of ``onSocketThread(_:)``).
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await onSocketThread(body)
}

/// Seeds an app with an APNs channel, users and subscriptions through plain SQL.
struct Seed {
    let appID: UUID
    let connection: PostgresConnection

    init(_ connectionString: String) throws {
        try self.init(connectionString, appID: UUID())
    }

    /// Rows for `appID`: an earlier seed's app, to add to it.
    init(_ connectionString: String, appID: UUID) throws {
        self.appID = appID
        connection = try PostgresConnection(connectionString: connectionString, applicationName: "pushizo-test-seed")
    }

    func app(defaultLanguage: String = "en", channelSettings: String? = nil, endpoint: String? = nil) throws {
        _ = try connection.query(
            "INSERT INTO apps (id, default_language) VALUES ($1, $2)", [appID, defaultLanguage])
        if let channelSettings {
            _ = try connection.query(
                "INSERT INTO app_channels (app_id, provider, settings, endpoint) VALUES ($1, 'apns', $2::jsonb, $3)",
                [appID, channelSettings, endpoint])
        }
    }

    @discardableResult
    func user(_ externalID: String) throws -> UUID {
        try connection.query(
            "INSERT INTO users (app_id, external_id) VALUES ($1, $2) RETURNING id", [appID, externalID]
        )[0].decode(UUID.self, "id")
    }

    @discardableResult
    func subscription(
        user: UUID? = nil, platform: String = "ios", token: String = Seed.token(), language: String? = "en",
        status: String = "active"
    ) throws -> UUID {
        try connection.query(
            """
            INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language, status)
            VALUES ($1, $2, $3, $4, 'production', $5, $6) RETURNING id
            """, [appID, user, platform, token, language, status]
        )[0].decode(UUID.self, "id")
    }

    @discardableResult
    func notification(message: String = #"{"contents": {"en": "hi"}}"#, target: String) throws -> UUID {
        try connection.query(
            "INSERT INTO notifications (app_id, message, target) VALUES ($1, $2::jsonb, $3::jsonb) RETURNING id",
            [appID, message, target]
        )[0].decode(UUID.self, "id")
    }

    /// Installs a `BEFORE <event> ON deliveries FOR EACH ROW` trigger running `body` (PL/pgSQL statements that
    /// may `RAISE`), then `RETURN NEW`: how tests make one row fail a statement as bad data would.
    func poisonDeliveries(before event: String, _ body: String) throws {
        _ = try connection.query(
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \(body) RETURN NEW; END $$")
        _ = try connection.query(
            "CREATE TRIGGER poison BEFORE \(event) ON deliveries FOR EACH ROW EXECUTE FUNCTION poison()")
    }

    /// A random 64-hex-digit device token with the given 4-digit prefix (the emulator's conventions).
    static func token(prefix: String = "a0a0") -> String {
        var text = prefix
        while text.count < 64 { text += String(format: "%02x", UInt8.random(in: 0...255)) }
        return String(text.prefix(64))
    }
}
