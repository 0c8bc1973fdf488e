import Foundation
import Testing
@testable import PushCrypto

@Suite struct P256Tests {
    @Test func signatureIsRawAndVerifies() throws {
        let key = try P256PrivateKey.generate()
        let message = Array("header.claims".utf8)
        let signature = try key.signES256(message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verifyES256(signature: signature, for: message))
        #expect(!key.publicKey.verifyES256(signature: signature, for: Array("header.claimz".utf8)))
        var tampered = signature
        tampered[10] ^= 0x01
        #expect(!key.publicKey.verifyES256(signature: tampered, for: message))
        #expect(!key.publicKey.verifyES256(signature: Array(signature.prefix(63)), for: message))
        let other = try P256PrivateKey.generate()
        #expect(!other.publicKey.verifyES256(signature: signature, for: message))
    }

    @Test func pemRoundTrips() throws {
        let key = try P256PrivateKey.generate()
        let pem = key.pkcs8PEM
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reread = try P256PrivateKey(pem: pem)
        #expect(reread.publicKey == key.publicKey)
        let publicPEM = key.publicKey.pem
        #expect(publicPEM.hasPrefix("-----BEGIN PUBLIC KEY-----"))
        #expect(try P256PublicKey(pem: publicPEM) == key.publicKey)
        let point = key.publicKey.x963Representation
        #expect(point.count == 65 && point[0] == 4)
        #expect(try P256PublicKey(x963: point) == key.publicKey)
        let signature = try reread.signES256(Array("x".utf8))
        #expect(try P256PublicKey(x963: point).verifyES256(signature: signature, for: Array("x".utf8)))
    }

    @Test func descriptionsRedactTheKey() throws {
        let key = try P256PrivateKey.generate()
        #expect(key.description == "P256PrivateKey(<redacted>)")
        #expect(String(reflecting: key) == "P256PrivateKey(<redacted>)")
        #expect("\(key)" == "P256PrivateKey(<redacted>)")
    }

    @Test func badPEMErrorsNeverEchoTheInput() throws {
        let secretLooking = "-----BEGIN PRIVATE KEY-----\nTUlJQ0VDUkVUU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
        let error = try #require(throws: CryptoError.self) { try P256PrivateKey(pem: secretLooking) }
        #expect(error.code == .invalidKey)
        #expect(!error.description.contains("TUlJQ0VDUkVU"))
        #expect(throws: CryptoError.self) { try P256PrivateKey(pem: "") }
        #expect(throws: CryptoError.self) { try P256PublicKey(pem: "not a key") }
    }

    @Test func rejectsNonP256Keys() throws {
        // A P-384 key made by the openssl CLI must be refused: ES256 is P-256 only.
        let pem = try runOpenSSL(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"])
        let error = try #require(throws: CryptoError.self) { try P256PrivateKey(pem: pem) }
        #expect(error.code == .invalidKey)
    }

    @Test func acceptsAnOpenSSLGeneratedP8() throws {
        let pem = try runOpenSSL(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
        #expect(pem.contains("BEGIN PRIVATE KEY"))
        let key = try P256PrivateKey(pem: pem)
        let signature = try key.signES256(Array("abc".utf8))
        #expect(key.publicKey.verifyES256(signature: signature, for: Array("abc".utf8)))
    }

    @Test func rejectsEncryptedKeysWithoutPrompting() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushcrypto-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let plain = directory.appendingPathComponent("key.pem")
        try P256PrivateKey.generate().pkcs8PEM.write(to: plain, atomically: true, encoding: .utf8)
        let encrypted = try runOpenSSL(["pkcs8", "-topk8", "-in", plain.path, "-v2", "aes-256-cbc", "-passout", "pass:secret"])
        #expect(encrypted.contains("ENCRYPTED PRIVATE KEY"))
        let error = try #require(throws: CryptoError.self) { try P256PrivateKey(pem: encrypted) }
        #expect(error.code == .invalidKey)
    }

    @Test func rejectsPointsOffTheCurve() throws {
        var point = try P256PrivateKey.generate().publicKey.x963Representation
        point[64] ^= 0x01
        #expect(throws: CryptoError.self) { try P256PublicKey(x963: point) }
        #expect(throws: CryptoError.self) { try P256PublicKey(x963: Array(point.prefix(33))) }
    }

    /// The raw R||S converts back to the DER form that the openssl CLI (a verifier independent of our
    /// wrapper's verify path) accepts.
    @Test func openSSLCommandLineVerifiesTheSignature() throws {
        let key = try P256PrivateKey.generate()
        let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJURUFNIn0".utf8)
        let raw = try key.signES256(message)
        let der = try #require(ECDSASignature.derFromRaw(raw))
        #expect(ECDSASignature.rawFromDER(der) == raw)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushcrypto-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try key.publicKey.pem.write(to: directory.appendingPathComponent("pub.pem"), atomically: true, encoding: .utf8)
        try Data(der).write(to: directory.appendingPathComponent("sig.der"))
        try Data(message).write(to: directory.appendingPathComponent("msg"))
        let output = try runOpenSSL(["dgst", "-sha256", "-verify", directory.appendingPathComponent("pub.pem").path,
                                     "-signature", directory.appendingPathComponent("sig.der").path,
                                     directory.appendingPathComponent("msg").path])
        #expect(output.contains("Verified OK"))
        try Data(message + [0x21]).write(to: directory.appendingPathComponent("msg"))
        #expect(throws: (any Error).self) {
            try runOpenSSL(["dgst", "-sha256", "-verify", directory.appendingPathComponent("pub.pem").path,
                            "-signature", directory.appendingPathComponent("sig.der").path,
                            directory.appendingPathComponent("msg").path])
        }
    }
}

struct OpenSSLCommandFailed: Error { var status: Int32; var output: String }

/// Runs the `openssl` command-line tool and returns its standard output; throws on a non-zero exit.
@discardableResult
func runOpenSSL(_ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl"] + arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = Pipe()
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let output = String(decoding: data, as: UTF8.self)
    guard process.terminationStatus == 0 else { throw OpenSSLCommandFailed(status: process.terminationStatus, output: output) }
    return output
}
