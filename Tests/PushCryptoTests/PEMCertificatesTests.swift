import Foundation
import PushCrypto
import Testing

/// What `PUSHIZO_CA_FILE` must hold: PEM certificates, every block of them valid.
@Suite("PEM certificate bundles")
struct PEMCertificatesTests {
    /// Debian's system bundle (the ca-certificates package the install script adds).
    static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    func bundle() throws -> String {
        try String(contentsOfFile: Self.systemBundle, encoding: .utf8)
    }

    @Test func theSystemBundleParsesWhole() throws {
        let text = try bundle()
        let count = try PEMCertificates.count(in: Array(text.utf8))
        #expect(count == text.components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1)
        #expect(count > 1)
        // CRLF line ends (a bundle edited on Windows) read the same.
        #expect(try PEMCertificates.count(in: Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)) == count)
    }

    @Test func aBundleWithOneBrokenBlockIsRefused() throws {
        let text = try bundle()
        let first = try #require(text.range(of: "-----END CERTIFICATE-----")).upperBound
        let good = String(text[..<first]) + "\n"
        #expect(try PEMCertificates.count(in: Array(good.utf8)) == 1)
        let broken = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
        for refused in [good + broken, broken + good, "", "plain text, no PEM at all\n",
                        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"] {
            #expect(throws: CryptoError.self) { try PEMCertificates.count(in: Array(refused.utf8)) }
        }
        #expect(throws: CryptoError.self) {
            try PEMCertificates.count(in: Array(repeating: 0x41, count: PEMCertificates.maximumBundleSize + 1))
        }
    }
}
