import Emulator
import Foundation
import HTTP2
import PushCrypto
import Worker

/// `pushizo-worker emulator`: the built-in provider emulator (docs/emulator.md) until SIGTERM/SIGINT.
enum EmulatorCommand {
    static let keys: [ConfigurationKey] = [
        .emulatorListen, .emulatorTLSDirectory, .emulatorCleartext, .emulatorAPNsKeys, .emulatorRequestLog,
        .emulatorReadyFile, .emulatorLatency, .emulatorWebPushSeed, .emulatorFCMKeys, .emulatorFCMTokenLifetime, .emulatorHuaweiApps, .logLevel, .logFormat,
        .emulatorRefuseBeyond,
        .emulatorAPNsClientCA,
    ]

    static func main(environment: [String: String], arguments: [String]) async throws {
        let reader = try ConfigurationReader(
            environment: environment, arguments: arguments, keys: keys)
        let logger = try LoggerConfiguration.make(reader, label: "emulator")
        let (host, port) = try listenAddress(reader)
        let cleartext = try reader.bool(.emulatorCleartext)
        let apnsKeys = try self.apnsKeys(reader)
        let latency = try reader.duration(.emulatorLatency).inSeconds
        let fcmAccounts = try self.fcmAccounts(reader)
        let huaweiApps = try self.huaweiApps(reader)
        let refuseBeyond = try reader.int(.emulatorRefuseBeyond)
        let fcmTokenLifetime = try reader.duration(.emulatorFCMTokenLifetime).inSeconds

        var tls: TLSServerConfiguration?
        var caFile: String?
        if !cleartext {
            guard let directory = reader.string(.emulatorTLSDirectory) else {
                throw ConfigurationError(
                    key: ConfigurationKey.emulatorTLSDirectory.name,
                    problem: "is required for TLS (or set PUSHIZO_EMULATOR_CLEARTEXT=true for h2c)")
            }
            let files = try tlsFiles(in: directory, host: host)
            tls = TLSServerConfiguration(certificateChainFile: files.chain, privateKeyFile: files.key)
            caFile = files.ca
            if let clientCA = reader.string(.emulatorAPNsClientCA) {
                // Certificate-based APNs: ask for a client certificate, let token-based clients connect without.
                tls?.clientCertificateTrustFile = clientCA
                tls?.clientCertificatesOptional = true
            }
        }

        let requestLog: JSONLinesFile? = try reader.string(.emulatorRequestLog).map { path in
            do {
                return try JSONLinesFile(path: path)
            } catch {
                throw ConfigurationError(key: ConfigurationKey.emulatorRequestLog.name, problem: "cannot open \(path): \(error)")
            }
        }
        let apns = APNsEmulator(keys: apnsKeys, onAccept: { accepted in requestLog?.append(accepted.jsonLine) })
        let webPush = WebPushEmulator(
            seed: reader.text(.emulatorWebPushSeed) ?? "",
            onAccept: { accepted in requestLog?.append(accepted.jsonLine) })
        let fcm = FCMEmulator(
            accounts: fcmAccounts, tokenLifetime: Int(fcmTokenLifetime),
            onAccept: { accepted in requestLog?.append(accepted.jsonLine) })
        let huawei = HuaweiEmulator(
            apps: huaweiApps, tokenLifetime: Int(fcmTokenLifetime),
            onAccept: { accepted in requestLog?.append(accepted.jsonLine) })
        let eventLoop = try HTTP2EventLoop(name: "pushizo-emulator-io")
        let server = EmulatorServer(
            eventLoop: eventLoop, host: host, port: port, tls: tls,
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
            ], latency: latency, refuseStreamsBeyond: refuseBeyond > 0 ? refuseBeyond : nil)
        let boundPort = try server.start()
        logger.notice(
            "emulator listening",
            [
                "address": "\(cleartext ? "http" : "https")://\(host):\(boundPort)", "apns_keys": "\(apnsKeys.count)", "fcm_accounts": "\(fcmAccounts.count)",
                "huawei_apps": "\(huaweiApps.count)",
                "ca_file": caFile ?? "-",
            ])
        if let readyFile = reader.string(.emulatorReadyFile) {
            try Data("\(boundPort)\n".utf8).write(to: URL(fileURLWithPath: readyFile), options: .atomic)
        }

        let stop = StopFlag()
        let signals = SignalHandling(logger: logger) { _ in stop.set() }
        while !stop.isSet { try? await Task.sleep(for: .milliseconds(100)) }
        await server.shutdown()
        eventLoop.shutdown()
        requestLog?.flush()
        logger.notice(
            "emulator stopped",
            [
                "apns_accepted": "\(apns.acceptedCount)", "apns_responses": "\(apns.statusCounts)",
                "webpush_accepted": "\(webPush.acceptedCount)", "webpush_responses": "\(webPush.statusCounts)",
                "fcm_accepted": "\(fcm.acceptedCount)", "fcm_errors": "\(fcm.errorCounts)",
                "fcm_tokens_issued": "\(fcm.tokensIssued)",
                "huawei_accepted": "\(huawei.acceptedCount)", "huawei_errors": "\(huawei.errorCounts)",
            ])
        withExtendedLifetime(signals) {}
    }

    static func listenAddress(_ reader: ConfigurationReader) throws -> (String, Int) {
        let text = reader.text(.emulatorListen) ?? ""
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port), colon != text.startIndex
        else {
            throw ConfigurationError(key: ConfigurationKey.emulatorListen.name, problem: "\"\(text)\" is not host:port")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// `APPID:/path/secret-file,...`: the client secret is read from a file (its surrounding whitespace
    /// trimmed) so it appears in no command line.
    static func huaweiApps(_ reader: ConfigurationReader) throws -> [HuaweiEmulatorApp] {
        guard let text = reader.string(.emulatorHuaweiApps) else { return [] }
        var apps: [HuaweiEmulatorApp] = []
        for entry in text.split(separator: ",") {
            let parts = entry.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.allSatisfy({ (48...57).contains($0) }) else {
                throw ConfigurationError(
                    key: ConfigurationKey.emulatorHuaweiApps.name, problem: "\"\(entry)\" is not APPID:secret-file")
            }
            guard let secret = try? String(contentsOfFile: parts[1], encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
                  !secret.isEmpty
            else {
                throw ConfigurationError(key: ConfigurationKey.emulatorHuaweiApps.name, problem: "cannot read a secret from \(parts[1])")
            }
            apps.append(HuaweiEmulatorApp(appID: parts[0], clientSecret: secret))
        }
        return apps
    }

    /// `TEAMID:KEYID:/path/public.pem,...`
    static func apnsKeys(_ reader: ConfigurationReader) throws -> [APNsEmulatorKey] {
        guard let text = reader.string(.emulatorAPNsKeys) else { return [] }
        var keys: [APNsEmulatorKey] = []
        for entry in text.split(separator: ",") {
            let parts = entry.split(separator: ":", maxSplits: 2).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ConfigurationError(
                    key: ConfigurationKey.emulatorAPNsKeys.name, problem: "\"\(entry)\" is not TEAMID:KEYID:public-key.pem")
            }
            let pem: String
            do {
                pem = try String(contentsOfFile: parts[2], encoding: .utf8)
            } catch {
                throw ConfigurationError(key: ConfigurationKey.emulatorAPNsKeys.name, problem: "cannot read \(parts[2])")
            }
            let publicKey: P256PublicKey
            do {
                publicKey = try P256PublicKey(pem: pem)
            } catch {
                // A private key is accepted too: the emulator only needs its public half.
                guard let privateKey = try? P256PrivateKey(pem: pem) else {
                    throw ConfigurationError(
                        key: ConfigurationKey.emulatorAPNsKeys.name, problem: "\(parts[2]) is not a P-256 public key PEM")
                }
                publicKey = privateKey.publicKey
            }
            keys.append(APNsEmulatorKey(teamID: parts[0], keyID: parts[1], publicKey: publicKey))
        }
        return keys
    }

    /// `client_email:/path/key.pem,...` (the email holds no `:`; the PEM is an RSA public or private key).
    static func fcmAccounts(_ reader: ConfigurationReader) throws -> [FCMEmulatorAccount] {
        guard let text = reader.string(.emulatorFCMKeys) else { return [] }
        let key = ConfigurationKey.emulatorFCMKeys.name
        var accounts: [FCMEmulatorAccount] = []
        for entry in text.split(separator: ",") {
            let parts = entry.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, parts[0].contains("@"), !parts[1].isEmpty else {
                throw ConfigurationError(key: key, problem: "\"\(entry)\" is not client_email:key.pem")
            }
            let pem: String
            do {
                pem = try String(contentsOfFile: parts[1], encoding: .utf8)
            } catch {
                throw ConfigurationError(key: key, problem: "cannot read \(parts[1])")
            }
            let publicKey: RSAPublicKey
            if let parsed = try? RSAPublicKey(pem: pem) {
                publicKey = parsed
            } else if let privateKey = try? RSAPrivateKey(pem: pem) {
                // Only the public half is kept.
                publicKey = privateKey.publicKey
            } else {
                throw ConfigurationError(key: key, problem: "\(parts[1]) is not an RSA public or private key PEM")
            }
            accounts.append(FCMEmulatorAccount(clientEmail: parts[0], publicKey: publicKey))
        }
        return accounts
    }

    /// Uses `ca.pem`, `chain.pem` (leaf + CA) and `key.pem` from `directory` (what
    /// `LocalCertificateAuthority` writes), generating all three when any is missing, so a restarted emulator
    /// keeps its CA and workers that trust it keep working.
    static func tlsFiles(in directory: String, host: String) throws -> (ca: String, chain: String, key: String) {
        let certificate = (directory as NSString).appendingPathComponent("chain.pem")
        let existing = ["ca.pem", "chain.pem", "key.pem"].allSatisfy {
            FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent($0))
        }
        if existing {
            return (
                (directory as NSString).appendingPathComponent("ca.pem"), certificate,
                (directory as NSString).appendingPathComponent("key.pem")
            )
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var hostnames = ["localhost", "127.0.0.1", "::1"]
        if !hostnames.contains(host), host != "0.0.0.0", host != "::" { hostnames.append(host) }
        let files = try LocalCertificateAuthority.generate(in: directory, hostnames: hostnames)
        return (files.caCertificate, files.certificateChain, files.privateKey)
    }
}

import Synchronization

final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .sequentiallyConsistent) }
    var isSet: Bool { flag.load(ordering: .sequentiallyConsistent) }
}
