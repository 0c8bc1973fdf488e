import Foundation
import Testing
@testable import PushCrypto

/// Lengths handed to OpenSSL's `int` parameters stay in range whatever the caller passes.
@Suite struct CryptoBoundsTests {
    /// Keys longer than the 64-byte block are hashed first by us, exactly as RFC 2104 §2 says HMAC does.
    @Test func longKeysAreHashedFirstWithTheSameResult() {
        let message = Array("pushizo".utf8)
        let long = [UInt8](repeating: 0x42, count: 65)
        #expect(HMACSHA256.authenticationCode(key: long, message: message)
            == HMACSHA256.authenticationCode(key: SHA256.hash(long), message: message))
        let block = [UInt8](repeating: 0x42, count: 64)
        #expect(HMACSHA256.authenticationCode(key: block, message: message)
            != HMACSHA256.authenticationCode(key: SHA256.hash(block), message: message))
    }

    @Test func oversizedPEMIsRefusedWithoutEchoingIt() throws {
        let pem = try P256PrivateKey.generate().pkcs8PEM
        let padded = pem + String(repeating: "Z", count: maximumPEMSize)
        let error = try #require(throws: CryptoError.self) { try P256PrivateKey(pem: padded) }
        #expect(error.code == .invalidKey)
        #expect(!error.description.contains("ZZZZ"))
        #expect(!error.description.contains(pem.split(separator: "\n")[1]))
    }

    @Test func randomBytesOfManyLengths() {
        for count in [0, 1, 31, 4096] {
            #expect(SecureRandom.bytes(count).count == count)
        }
        #expect(SecureRandom.bytes(32) != SecureRandom.bytes(32))
    }
}
