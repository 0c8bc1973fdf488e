import Foundation
import HTTP2
import PushCrypto

/// Throwaway APNs-style client certificates (subject UID, Apple's topics and environment extensions) under a
/// throwaway client CA, made with OpenSSL in a temporary directory.
struct ClientCertificateFixtures {
    static let pkcs12Password = "p12 secret ✓"

    let directory: String
    let caFile: String
    let files: [String: LocalCertificateAuthority.ClientCertificateFiles]

    /// An Apple-like push certificate request: `UID=bundleID`, the topics extension (bundle, `.voip`,
    /// `.complication`) unless `topics` is false, and the environment OIDs asked for.
    static func apple(
        _ name: String, bundleID: String, environments: [ApplePushCertificate.Environment] = [.development, .production],
        topics: Bool = true, notAfterOffset: Int = 365 * 86400
    ) -> LocalCertificateAuthority.ClientCertificateRequest {
        var extensions: [(oid: String, der: [UInt8])] = []
        if environments.contains(.development) { extensions.append((ApplePushCertificate.developmentOID, ApplePushCertificate.nullExtension)) }
        if environments.contains(.production) { extensions.append((ApplePushCertificate.productionOID, ApplePushCertificate.nullExtension)) }
        if topics { extensions.append((ApplePushCertificate.topicsOID, ApplePushCertificate.topicsExtension(bundleID: bundleID))) }
        return .init(name: name, commonName: "Apple Push Services: \(bundleID)", userID: bundleID, extensions: extensions,
                     notAfterOffset: notAfterOffset)
    }

    init(_ requests: [LocalCertificateAuthority.ClientCertificateRequest]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-certs-\(UUID())").path
        let generated = try LocalCertificateAuthority.generateClientCertificates(
            in: directory, requests, pkcs12Password: Self.pkcs12Password)
        caFile = generated.caCertificate
        files = generated.certificates
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }

    func certificatePEM(_ name: String) throws -> String { try String(contentsOfFile: files[name]!.certificate, encoding: .utf8) }
    func keyPEM(_ name: String) throws -> String { try String(contentsOfFile: files[name]!.privateKey, encoding: .utf8) }
    func pkcs12(_ name: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: files[name]!.pkcs12))) }

    /// `app_channels.settings` with the PEM certificate and key (`topic` only when given).
    func pemSettings(_ name: String, topic: String? = nil) throws -> String {
        var settings = ["certificate": try certificatePEM(name), "private_key": try keyPEM(name)]
        if let topic { settings["topic"] = topic }
        return Self.json(settings)
    }

    /// `app_channels.settings` with the `.p12` as base64 and its password.
    func pkcs12Settings(_ name: String, password: String = Self.pkcs12Password) throws -> String {
        Self.json(["pkcs12": Data(try pkcs12(name)).base64EncodedString(), "pkcs12_password": password])
    }

    static func json(_ settings: [String: String]) -> String {
        let data = try! JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
