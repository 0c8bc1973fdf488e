import Emulator
import Foundation
import HTTP2
import Postgres
import PushCrypto
import SocketTestSupport
import Testing
@testable import Worker

/// `pushizo-worker run` against the APNs emulator with certificate-based channels: the emulator asks for a TLS
/// client certificate, trusts one test CA, and answers 403 `BadCertificate` / `BadCertificateEnvironment` as
/// Apple does; the worker presents each app's certificate on connections of its own.
@Suite("End to end with APNs client certificates", .serialized)
struct APNsCertificateEndToEndTests {
    /// The emulator over TLS, requesting client certificates issued by `trusted`'s CA (playing production).
    static func withEmulator<T: Sendable>(
        trustedClientCA: String, _ body: @Sendable (_ endpoint: String, _ caFile: String, _ apns: APNsEmulator) async throws -> T
    ) async throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-cert-e2e-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let files = try LocalCertificateAuthority.generate(in: directory)
        let apns = APNsEmulator(keys: [])
        let eventLoop = try HTTP2EventLoop(name: "test-cert-emulator")
        var tls = TLSServerConfiguration(
            certificateChainFile: files.certificateChain, privateKeyFile: files.privateKey, clientCertificateTrustFile: trustedClientCA)
        tls.clientCertificatesOptional = true
        let server = EmulatorServer(eventLoop: eventLoop, tls: tls, routes: [EmulatorServer.Route(pathPrefix: "/3/device/", provider: apns)])
        let port = try server.start()
        defer { eventLoop.shutdown() }
        do {
            let result = try await body("https://localhost:\(port)", files.caCertificate, apns)
            await server.shutdown()
            return result
        } catch {
            await server.shutdown()
            throw error
        }
    }

    @Test func certificateChannelsSendPauseOnBadCertificatesAndReportExpiry() async throws {
        let trusted = try ClientCertificateFixtures([
            ClientCertificateFixtures.apple("main", bundleID: "dev.pushizo.cert"),
            ClientCertificateFixtures.apple("other", bundleID: "dev.pushizo.other", topics: false, notAfterOffset: 20 * 86400),
            ClientCertificateFixtures.apple("sandbox", bundleID: "dev.pushizo.sandbox", environments: [.development]),
            ClientCertificateFixtures.apple("expired", bundleID: "dev.pushizo.expired", notAfterOffset: -3600),
        ])
        let rogue = try ClientCertificateFixtures([ClientCertificateFixtures.apple("rogue", bundleID: "dev.pushizo.rogue")])
        defer {
            trusted.remove()
            rogue.remove()
        }
        try await TestDatabase.withMigratedDatabase { url in
            try await Self.withEmulator(trustedClientCA: trusted.caFile) { endpoint, caFile, apns in
                // App name -> (settings, subscriptions).
                let apps: [(String, String, Int)] = [
                    ("main-pem", try trusted.pemSettings("main"), 2),
                    ("main-p12", try trusted.pkcs12Settings("main"), 1),
                    ("other", try trusted.pemSettings("other"), 1),
                    ("sandbox", try trusted.pemSettings("sandbox"), 1),
                    ("expired", try trusted.pemSettings("expired"), 1),
                    ("rogue", try rogue.pemSettings("rogue"), 1),
                ]
                let seeded = try await onThread {
                    var ids: [String: (app: UUID, subscriptions: [UUID])] = [:]
                    for (name, settings, count) in apps {
                        let seed = try Seed(url)
                        try seed.app(channelSettings: settings, endpoint: endpoint)
                        let user = try seed.user(name)
                        let subscriptions = try (0..<count).map { _ in try seed.subscription(user: user) }
                        _ = try seed.notification(target: #"{"include_external_ids": ["\#(name)"]}"#)
                        ids[name] = (seed.appID, subscriptions)
                        if name == "main-pem" {
                            // A Live Activity update token of the same user: Apple takes those pushes over
                            // token-based authentication only, so this one fails alone and pauses nothing.
                            let live = try seed.connection.query(
                                """
                                INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, kind)
                                VALUES ($1, $2, 'ios', $3, 'production', 'liveactivity') RETURNING id
                                """, [seed.appID, user, Seed.token()])[0].decode(UUID.self, "id")
                            _ = try seed.notification(
                                message: #"{"apns_push_type": "liveactivity", "live_activity": {"event": "update", "timestamp": 1700000000, "content_state": {"eta": 5}}}"#,
                                target: #"{"include_external_ids": ["\#(name)"]}"#)
                            ids["main-pem/live"] = (seed.appID, [live])
                            // The same user's device as its MDM server knows it: an MDM push goes over the
                            // certificate, to the channel's topic as it is, with only the PushMagic.
                            let mdm = try seed.connection.query(
                                """
                                INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, kind)
                                VALUES ($1, $2, 'ios', $3, 'production', 'mdm') RETURNING id
                                """, [seed.appID, user, Seed.token()])[0].decode(UUID.self, "id")
                            _ = try seed.notification(
                                message: #"{"apns_push_type": "mdm", "mdm_push_magic": "9F2C-push-magic"}"#,
                                target: #"{"include_external_ids": ["\#(name)"]}"#)
                            ids["main-pem/mdm"] = (seed.appID, [mdm])
                        }
                    }
                    return ids
                }
                let port = try freePort()
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-cert-worker-\(UUID()).log").path
                _ = FileManager.default.createFile(atPath: log, contents: nil)
                defer { try? FileManager.default.removeItem(atPath: log) }
                let process = Process()
                process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
                process.arguments = ["run", "--poll-interval", "0.05"]
                process.environment = [
                    "PUSHIZO_DATABASE_URL": url, "PUSHIZO_CA_FILE": caFile, "PUSHIZO_LOG_LEVEL": "debug",
                    "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true", "PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(port)",
                    "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                ]
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
                process.standardOutput = handle
                process.standardError = handle
                try process.run()
                defer { if process.isRunning { process.terminate() } }

                // Hang guard 120 s: 5 sent (main ×3, its MDM push, other) and 3 channels paused.
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let deadline = ContinuousClock.now + .seconds(120)
                var sent = 0
                var paused: [UUID: String] = [:]
                var liveOutcome: [String] = []
                while ContinuousClock.now < deadline {
                    liveOutcome = try await database.query(
                        "SELECT event || '/' || reason AS e FROM delivery_events WHERE subscription_id = $1",
                        [seeded["main-pem/live"]!.subscriptions[0]]
                    ).map { $0["e"] ?? "" }
                    sent = try await database.query("SELECT count(*) AS n FROM delivery_events WHERE event = 'sent'")[0].decode(Int.self, "n")
                    paused = [:]
                    for row in try await database.query("SELECT app_id, paused_reason FROM app_channels WHERE paused_reason IS NOT NULL") {
                        paused[try row.decode(UUID.self, "app_id")] = row["paused_reason"] ?? ""
                    }
                    if sent == 5, paused.count == 3, !liveOutcome.isEmpty { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                let metrics = try await scrape("http://127.0.0.1:\(port)/metrics")
                process.terminate()
                try await onThread { process.waitUntilExit() }
                await database.shutdown()
                let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                #expect(process.terminationStatus == 0, "\(output)")

                #expect(sent == 5)
                #expect(liveOutcome == ["failed/push_type_unsupported"])
                let mdm = apns.acceptedNotifications.filter { $0.pushType == "mdm" }
                #expect(Set(mdm.map { "\($0.topic) \(String(decoding: $0.payload, as: UTF8.self))" })
                    == [#"dev.pushizo.cert {"mdm":"9F2C-push-magic"}"#])
                #expect(!apns.acceptedNotifications.contains { $0.pushType == "liveactivity" })
                #expect(paused[seeded["rogue"]!.app] == "bad_certificate")  // Apple's 403, from the emulator
                #expect(paused[seeded["sandbox"]!.app] == "bad_certificate_environment")  // ditto: the endpoint is an override
                #expect(paused[seeded["expired"]!.app] == "certificate_expired")  // before any connection
                let accepted = apns.acceptedNotifications
                // Deliveries by apns-id (fixed for a delivery's life: a resend after a request timeout on a loaded
                // machine carries the same one).
                #expect(Set(accepted.filter { $0.topic == "dev.pushizo.cert" }.map(\.apnsID)).count == 4)
                #expect(Set(accepted.filter { $0.topic == "dev.pushizo.other" }.map(\.apnsID)).count == 1)
                // The certificates that pushed: two apps shared one; never the rogue, sandbox or expired ones.
                let fingerprints = try [
                    "main": ClientCertificateIdentity(
                        certificatePEM: Array(trusted.certificatePEM("main").utf8), privateKeyPEM: Array(trusted.keyPEM("main").utf8), password: nil),
                    "other": ClientCertificateIdentity(
                        certificatePEM: Array(trusted.certificatePEM("other").utf8), privateKeyPEM: Array(trusted.keyPEM("other").utf8), password: nil),
                ].mapValues(\.certificate)
                #expect(apns.certificateFingerprints == Set(fingerprints.values.map(\.fingerprint)))
                #expect(apns.statusCounts[403] ?? 0 >= 2)
                // The soonest expiry among certificates in use ("other": 20 days; the expired one never got a client).
                let expiry = sample(metrics, #"pushizo_credential_expiry_timestamp_seconds{kind="apns_certificate"}"#)
                #expect(expiry == fingerprints["other"]!.notAfter.timeIntervalSince1970, "\(metrics)")
                // No secret in the worker's log.
                for name in ["main", "other", "sandbox", "expired"] {
                    let key = try trusted.keyPEM(name).split(separator: "\n")[1]
                    #expect(!output.contains(key))
                }
                #expect(!output.contains(Data(try trusted.pkcs12("main")).base64EncodedString().prefix(60)))

                // `check`: each certificate's facts and days left; the expired one fails the check.
                // The emulator is on localhost: allowed, as the worker in this test allows it.
                let (status, report) = try await EgressEndToEndTests.runCheck(
                    databaseURL: url, extra: ["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true"])
                #expect(status == 1, "\(report)")
                let lines = report.split(separator: "\n").map(String.init)
                func line(_ app: String) -> String { lines.first { $0.contains(seeded[app]!.app.uuidString.lowercased()) } ?? "" }
                #expect(line("main-p12").contains("bundle dev.pushizo.cert, topic dev.pushizo.cert, environments development+production"))
                #expect(line("main-p12").contains("(364 days left)"), "\(report)")
                #expect(line("other").contains("EXPIRES SOON: 19 days left"), "\(report)")
                #expect(line("sandbox").contains("environments development,") || line("sandbox").contains("environments development "), "\(report)")
                #expect(line("expired").contains("EXPIRED"), "\(report)")
                #expect(report.contains("FAILED: 1 channel with invalid settings"), "\(report)")
                #expect(!report.contains("PRIVATE KEY") && !report.contains(ClientCertificateFixtures.pkcs12Password), "\(report)")
            }
        }
    }
}
