import Emulator
import Foundation
import HTTP2
import PushCrypto
import Testing
import Worker

/// The APNs, Web Push, FCM and Huawei Push Kit emulators over real TLS on 127.0.0.1, with a fresh CA, a fresh `.p8`-style signing
/// key and a fresh VAPID key.
struct EmulatorHarness: Sendable {
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let webPushSeed = "pushizo-test-seed"
    static let vapidSubject = "mailto:ops@pushizo.example"
    static let fcmProjectID = "pushizo-test"
    static let fcmClientEmail = "worker@pushizo-test.iam.gserviceaccount.com"
    /// The Huawei app the emulator knows (its App ID is its OAuth 2.0 client ID) and its client secret.
    static let huaweiAppID = "10086123"
    static let huaweiClientSecret = "4d1c2b3a+9f8e/7d6c=5b4a"

    let port: Int
    let caFile: String
    let signingKey: P256PrivateKey
    let apns: APNsEmulator
    let webPush: WebPushEmulator
    let vapidKey: P256PrivateKey
    let fcm: FCMEmulator
    let fcmKey: RSAPrivateKey
    let huawei: HuaweiEmulator
    /// The server itself (its refusal count); set by `with`.
    var server: EmulatorServer?

    /// The Google service-account JSON of the FCM emulator's trusted account (`token_uri` at the emulator).
    var serviceAccountJSON: String {
        let account = [
            "type": "service_account", "project_id": Self.fcmProjectID, "client_email": Self.fcmClientEmail,
            "private_key": fcmKey.pkcs8PEM, "token_uri": "\(endpoint)\(FCMEmulator.tokenPath)",
        ]
        let data = try! JSONSerialization.data(withJSONObject: account, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }

    /// `app_channels.settings` for an app's `fcm` channel: `{"service_account": {...}}`.
    var fcmChannelSettings: String { #"{"service_account": \#(serviceAccountJSON)}"# }

    /// `app_channels.settings` for an app's `huawei` channel: the emulator's app, `token_uri` at the emulator;
    /// `secret` replaces the client secret.
    func huaweiChannelSettings(secret: String = huaweiClientSecret) -> String {
        let settings = [
            "app_id": Self.huaweiAppID, "client_secret": secret, "token_uri": "\(endpoint)\(HuaweiEmulator.tokenPath)",
        ]
        let data = try! JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }

    /// `app_channels.settings` for an app's `webpush` channel.
    var webPushChannelSettings: String { webPushChannelSettings(declarative: nil) }

    /// The `webpush` channel's settings with the VAPID key and subject, and `declarative` when given.
    func webPushChannelSettings(declarative: String?) -> String {
        var settings = ["vapid_private_key": vapidKey.pkcs8PEM, "subject": Self.vapidSubject]
        if let declarative { settings["declarative"] = declarative }
        let data = try! JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    /// An emulated browser subscription at this emulator (its endpoint, `p256dh`, `auth`, private key).
    func webSubscription(_ id: String) throws -> WebPushEmulatorSubscription {
        try WebPushEmulatorSubscriptions(seed: Self.webPushSeed).subscription(id: id)
    }

    /// `app_channels.settings` for an app using this emulator's key.
    var channelSettings: String {
        let settings: [String: String] = [
            "team_id": Self.teamID, "key_id": Self.keyID, "private_key": signingKey.pkcs8PEM, "topic": "dev.pushizo.test",
        ]
        let data = try! JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    var endpoint: String { "https://localhost:\(port)" }

    /// - Parameter latency: seconds each answer is held back (see `EmulatorServer`).
    /// - Parameter fcmTokenLifetime: seconds the FCM and Huawei emulators' access tokens live.
    /// - Parameter refuseStreamsBeyond: streams per connection before REFUSED_STREAM (see `EmulatorServer`).
    /// - Parameter retainLimit: accepted APNs requests kept for ``APNsEmulator/acceptedNotifications``.
    static func with<T: Sendable>(
        latency: Double = 0, fcmTokenLifetime: Int = 3600, refuseStreamsBeyond: Int? = nil, retainLimit: Int = 10_000,
        _ body: @Sendable (EmulatorHarness) async throws -> T) async throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-e2e-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let files = try LocalCertificateAuthority.generate(in: directory)
        let key = try P256PrivateKey.generate()
        let apns = APNsEmulator(
            keys: [APNsEmulatorKey(teamID: teamID, keyID: keyID, publicKey: key.publicKey)], retainLimit: retainLimit)
        let webPush = WebPushEmulator(seed: webPushSeed)
        let fcmKey = try RSAPrivateKey.generate()
        let fcm = FCMEmulator(
            accounts: [FCMEmulatorAccount(clientEmail: fcmClientEmail, publicKey: fcmKey.publicKey)],
            tokenLifetime: fcmTokenLifetime)
        let huawei = HuaweiEmulator(
            apps: [HuaweiEmulatorApp(appID: huaweiAppID, clientSecret: huaweiClientSecret)], tokenLifetime: fcmTokenLifetime)
        let eventLoop = try HTTP2EventLoop(name: "test-emulator-io")
        let server = EmulatorServer(
            eventLoop: eventLoop,
            tls: TLSServerConfiguration(certificateChainFile: files.certificateChain, privateKeyFile: files.privateKey),
            routes: [
                EmulatorServer.Route(pathPrefix: "/3/device/", provider: apns),
                EmulatorServer.Route(pathPrefix: APNsEmulatedChannels.managementPathPrefix, provider: apns),
                EmulatorServer.Route(pathPrefix: APNsEmulatedChannels.broadcastPathPrefix, provider: apns),
                EmulatorServer.Route(pathPrefix: WebPushEmulator.pathPrefix, provider: webPush),
                EmulatorServer.Route(pathPrefix: FCMEmulator.tokenPath, provider: fcm),
                EmulatorServer.Route(pathPrefix: FCMEmulator.sendPathPrefix, provider: fcm),
                // After FCM's `/v1/projects/`: Push Kit's `/v1/<app id>/` is the wider prefix.
                EmulatorServer.Route(pathPrefix: HuaweiEmulator.tokenPath, provider: huawei),
                EmulatorServer.Route(pathPrefix: HuaweiEmulator.sendPathPrefix, provider: huawei),
            ], latency: latency, refuseStreamsBeyond: refuseStreamsBeyond)
        let port = try server.start()
        var harness = EmulatorHarness(
            port: port, caFile: files.caCertificate, signingKey: key, apns: apns, webPush: webPush,
            vapidKey: try P256PrivateKey.generate(), fcm: fcm, fcmKey: fcmKey, huawei: huawei)
        harness.server = server
        do {
            let result = try await body(harness)
            await server.shutdown()
            eventLoop.shutdown()
            return result
        } catch {
            await server.shutdown()
            eventLoop.shutdown()
            throw error
        }
    }

    /// The real `pushizo-worker run` executable (not started), pointed at `databaseURL` and this emulator, with
    /// private networks allowed and warnings-only logs; `extra` adds or overrides environment entries.
    func workerProcess(databaseURL: String, arguments: [String] = ["run", "--poll-interval", "0.05"],
                       extra: [String: String] = [:]) -> Process
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = arguments
        process.environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "PUSHIZO_CA_FILE": caFile, "PUSHIZO_LOG_LEVEL": "warning",
            "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
        ].merging(extra) { _, new in new }
        return process
    }

    /// Runs the real `pushizo-worker run` (``workerProcess(databaseURL:arguments:extra:)``) while `body` runs,
    /// then stops it with SIGTERM, as systemd does, and expects exit status 0; `extra` adds or overrides environment
    /// entries.
    func withWorkerBinary(databaseURL: String, extra: [String: String] = [:], _ body: () async throws -> Void) async throws {
        let process = workerProcess(databaseURL: databaseURL, extra: extra)
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        try await body()
        process.terminate()
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationStatus == 0)
    }

    /// Runs ``workerProcess(databaseURL:arguments:extra:)`` with `PUSHIZO_EXIT_WHEN_DRAINED=true` until it exits
    /// by itself, the queue drained; a hang guard terminates it after `guardSeconds` (not a timing assertion).
    /// - Returns: the exited process, for its termination status.
    func runWorkerUntilDrained(databaseURL: String, guardSeconds: Int = 60) async throws -> Process {
        let process = workerProcess(databaseURL: databaseURL, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "true"])
        try process.run()
        let guardTask = Task {
            try await Task.sleep(for: .seconds(guardSeconds))
            process.terminate()
        }
        try await onThread { process.waitUntilExit() }
        guardTask.cancel()
        return process
    }

    /// A worker configuration for tests: fast polls and retries, exit once the queue is drained, private networks
    /// allowed (the emulator is on 127.0.0.1; `extra` may set `PUSHIZO_ALLOW_PRIVATE_NETWORKS` back to false).
    func workerConfiguration(databaseURL: String, workerID: String = "test-worker", extra: [String: String] = [:])
        throws -> WorkerConfiguration
    {
        var environment = [
            "PUSHIZO_DATABASE_URL": databaseURL, "PUSHIZO_CA_FILE": caFile, "PUSHIZO_EXIT_WHEN_DRAINED": "true",
            "PUSHIZO_POLL_INTERVAL": "0.05", "PUSHIZO_RETRY_BASE": "0.05", "PUSHIZO_RETRY_MAX": "1",
            "PUSHIZO_WORKER_ID": workerID, "PUSHIZO_REQUEST_TIMEOUT": "10", "PUSHIZO_LEASE_SECONDS": "60",
            // The emulator listens on 127.0.0.1: the egress policy would refuse it.
            "PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true",
        ]
        environment.merge(extra) { _, new in new }
        return try WorkerConfiguration(
            ConfigurationReader(environment: environment, arguments: [], keys: WorkerConfiguration.keys))
    }
}

/// Runs a worker until it drains the queue; fails the test if it has not after `limit` seconds (a hang
/// guard, not a timing assertion).
func runUntilDrained(_ runtime: WorkerRuntime, limit: Double = 60) async throws {
    let watchdog = Task {
        try await Task.sleep(for: .seconds(limit))
        runtime.requestStop()
    }
    await runtime.run()
    watchdog.cancel()
}

let quietLogger = Logger(label: "test", minimumLevel: .error)

/// Runs a worker until `condition` holds (checked every 50 ms), then stops it and waits for it to finish;
/// records an issue if the condition never held within `limit` seconds (a hang guard).
func runUntil(
    _ runtime: WorkerRuntime, limit: Double = 60, _ what: String, _ condition: @escaping @Sendable () async throws -> Bool
) async throws {
    let run = Task { await runtime.run() }
    let deadline = ContinuousClock.now + .seconds(limit)
    var met = false
    while ContinuousClock.now < deadline {
        if try await condition() {
            met = true
            break
        }
        try await Task.sleep(for: .milliseconds(50))
    }
    runtime.requestStop()
    await run.value
    if !met { Issue.record("timed out waiting until \(what)") }
}

/// Polls `condition` every 50 ms until it holds; records an issue naming `what` when it has not after `limit`
/// seconds (a hang guard, not a timing assertion). Returns whether it held.
@discardableResult
func waitUntil(_ what: String, limit: Double = 60, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(limit)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(50))
    }
    Issue.record("timed out waiting until \(what)")
    return false
}
