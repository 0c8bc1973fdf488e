import DeliveryCore
import Foundation
import Postgres
import Testing

@testable import Worker

/// `pushizo-worker preview --notification ID --subscription ID`: the real executable reads the rows of a migrated
/// PostgreSQL as the worker would and prints what it would send that device, or why not; it changes nothing and
/// prints no credential.
@Suite("Preview from the database", .serialized)
struct PreviewFromDatabaseTests {
    static let privateKeyMarker = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg-not-a-real-key"

    /// Runs `pushizo-worker preview <arguments>` against `url`: exit status, stdout, stderr.
    static func preview(_ arguments: [String], databaseURL: String) async throws -> (status: Int32, output: String, errors: String) {
        let (status, output, errors) = try await runExecutable(["preview"] + arguments, environment: ["PUSHIZO_DATABASE_URL": databaseURL])
        return (status, output, errors)
    }

    /// An app with an APNs channel (its private key in the settings), a user with tags, an iOS subscription and a
    /// notification addressed to it whose heading uses the tag.
    static func seed(_ url: String) throws -> (app: UUID, notification: UUID, subscription: UUID) {
        let seed = try Seed(url)
        try seed.app(channelSettings: """
            {"topic": "com.example.app", "team_id": "TEAMID1234", "key_id": "KEYID12345", "private_key": "\(privateKeyMarker)"}
            """)
        let user = try seed.user("user-42")
        _ = try seed.connection.query(#"UPDATE users SET tags = '{"first_name": "Ayşe"}' WHERE id = $1"#, [user])
        let subscription = try seed.subscription(user: user)
        let notification = try seed.notification(
            message: #"{"headings": {"en": "Hi {{ first_name }}"}, "contents": {"en": "Your order shipped"}}"#,
            target: #"{"include_subscription_ids": ["\#(subscription.uuidString)"]}"#)
        return (seed.appID, notification, subscription)
    }

    /// A command line preview cannot read exits 2 naming what it could not read, then the usage, as the other
    /// commands name an unknown flag.
    @Test func aCommandLineItCannotReadNamesTheFlag() async throws {
        for (arguments, named) in [
            (["--bogus"], "unknown flag --bogus"),
            (["in.json", "--bogus=1"], "unknown flag --bogus"),
            (["--database-url", "postgresql://localhost/none"], "--database-url is read only with --notification"),
            (["a.json", "b.json"], "unexpected argument \"b.json\""),
        ] {
            let (status, _, errors) = try await runExecutable(["preview"] + arguments, environment: [:])
            #expect(status == 2, "\(arguments): \(errors)")
            #expect(errors.contains(named), "\(arguments): \(errors)")
            #expect(errors.contains("usage: pushizo-worker preview"), "\(errors)")
        }
    }

    @Test func showsTheRequestTheWorkerWouldSendAndNoCredential() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (_, notification, subscription) = try await onThread { try Self.seed(url) }
            let result = try await Self.preview(
                ["--notification", notification.uuidString, "--subscription", subscription.uuidString], databaseURL: url)
            #expect(result.status == 0, "\(result.errors)")
            let json = try JSONValue(parsing: Array(result.output.utf8))
            #expect(json["decision"]?["action"]?.stringValue == "send", "\(result.output)")
            #expect(json["decision"]?["provider"]?.stringValue == "apns")
            let headers = json["request"]?["headers"]?.arrayValue ?? []
            let topic = headers.first { $0["name"]?.stringValue == "apns-topic" }?["value"]?.stringValue
            #expect(topic == "com.example.app", "\(result.output)")
            #expect(json["request"]?["body_text"]?.stringValue?.contains("Hi Ayşe") == true, "\(result.output)")
            #expect(!result.output.contains(Self.privateKeyMarker))
            // The signing key was read: no note about an all-zero key.
            #expect(!result.output.contains("all-zero key"), "\(result.output)")
            // Read-only: nothing queued, claimed or recorded.
            let counts = try await onThread {
                try PostgresConnection(connectionString: url).query(
                    "SELECT (SELECT count(*) FROM deliveries)::int AS d, (SELECT count(*) FROM delivery_events)::int AS e")[0]
            }
            #expect(counts["d"] == "0" && counts["e"] == "0")
        }
    }

    @Test func showsTheDecisionWhenNothingWouldBeSent() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (app, notification, subscription) = try await onThread { try Self.seed(url) }
            // Quiet hours around now in the app's zone: deferred, no request.
            try await onThread {
                _ = try PostgresConnection(connectionString: url).query(
                    """
                    UPDATE apps SET default_timezone = 'UTC',
                        quiet_hours_start = ((now() AT TIME ZONE 'UTC') - interval '1 hour')::time,
                        quiet_hours_end = ((now() AT TIME ZONE 'UTC') + interval '1 hour')::time
                    WHERE id = $1
                    """, [app])
            }
            let arguments = ["--notification", notification.uuidString, "--subscription", subscription.uuidString]
            let quiet = try await Self.preview(arguments, databaseURL: url)
            #expect(quiet.status == 0, "\(quiet.errors)")
            let json = try JSONValue(parsing: Array(quiet.output.utf8))
            #expect(json["decision"]?["action"]?.stringValue == "defer", "\(quiet.output)")
            #expect(json["decision"]?["reason"]?.stringValue == "quiet_hours", "\(quiet.output)")
            #expect(json["request"] == nil)

            // An unsubscribed device: skipped.
            try await onThread {
                _ = try PostgresConnection(connectionString: url).query(
                    "UPDATE subscriptions SET status = 'unsubscribed' WHERE id = $1", [subscription])
            }
            let skipped = try await Self.preview(arguments, databaseURL: url)
            let skippedJSON = try JSONValue(parsing: Array(skipped.output.utf8))
            #expect(skippedJSON["decision"]?["action"]?.stringValue == "skip", "\(skipped.output)")
            #expect(skippedJSON["decision"]?["reason"]?.stringValue == "subscription_inactive", "\(skipped.output)")

            // No such rows: exit 1 naming the missing one; a malformed command line: exit 2.
            let missing = try await Self.preview(
                ["--notification", notification.uuidString, "--subscription", UUID().uuidString], databaseURL: url)
            #expect(missing.status == 1 && missing.errors.contains("no subscription"), "\(missing.errors)")
            let usage = try await Self.preview(["--notification", notification.uuidString], databaseURL: url)
            #expect(usage.status == 2, "\(usage.errors)")
        }
    }
}
