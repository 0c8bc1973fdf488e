import PushCrypto
import Testing

/// RFC 8291 §5 / Appendix A: fixed keys and salt give a fixed body.
enum RFC8291 {
    static let plaintext = Array("When I grow up, I want to be a watermelon".utf8)
    static let uaPublic = Base64URL.decode("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")!
    static let uaPrivate = Base64URL.decode("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94")!
    static let asPublic = Base64URL.decode("BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")!
    static let asPrivate = Base64URL.decode("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")!
    static let authSecret = Base64URL.decode("BTBZMqHH6r4Tts7J_aSIgg")!
    static let salt = Base64URL.decode("DGv6ra1nlYgDCS1FRnbzlw")!
    static let sharedSecret = Base64URL.decode("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs")!
    static let body = Base64URL.decode("DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")!
}

@Suite("Web Push encryption (RFC 8291)")
struct WebPushEncryptionTests {
    @Test func appendixAEncryptsToTheRFCBytes() throws {
        let serverKey = try P256PrivateKey(rawPrivateKey: RFC8291.asPrivate, publicKey: RFC8291.asPublic)
        let body = try WebPushEncryption.encrypt(plaintext: RFC8291.plaintext, userAgentPublicKey: RFC8291.uaPublic,
                                                 authSecret: RFC8291.authSecret, applicationServerKey: serverKey,
                                                 salt: RFC8291.salt)
        #expect(body.count == 86 + RFC8291.plaintext.count + 1 + 16)
        #expect(hex(body) == hex(RFC8291.body))
    }

    @Test func appendixAECDHSecret() throws {
        let serverKey = try P256PrivateKey(rawPrivateKey: RFC8291.asPrivate, publicKey: RFC8291.asPublic)
        let secret = try serverKey.sharedSecret(with: try P256PublicKey(x963: RFC8291.uaPublic))
        #expect(hex(secret) == hex(RFC8291.sharedSecret))
        let userAgentKey = try P256PrivateKey(rawPrivateKey: RFC8291.uaPrivate, publicKey: RFC8291.uaPublic)
        #expect(try userAgentKey.sharedSecret(with: try P256PublicKey(x963: RFC8291.asPublic)) == RFC8291.sharedSecret)
    }

    @Test func appendixADecryptsToTheRFCPlaintext() throws {
        let userAgentKey = try P256PrivateKey(rawPrivateKey: RFC8291.uaPrivate, publicKey: RFC8291.uaPublic)
        let plaintext = try WebPushEncryption.decrypt(body: RFC8291.body, userAgentPrivateKey: userAgentKey,
                                                      authSecret: RFC8291.authSecret)
        #expect(plaintext == RFC8291.plaintext)
    }

    @Test func freshKeysAndSaltRoundTrip() throws {
        let subscriber = try P256PrivateKey.generate()
        let auth = SecureRandom.bytes(16)
        let message = Array(#"{"title":"Hi"}"#.utf8)
        let first = try WebPushEncryption.encrypt(plaintext: message, userAgentPublicKey: subscriber.publicKey.x963Representation, authSecret: auth)
        let second = try WebPushEncryption.encrypt(plaintext: message, userAgentPublicKey: subscriber.publicKey.x963Representation, authSecret: auth)
        // A fresh salt and ephemeral key every time.
        #expect(first[0..<16] != second[0..<16])
        #expect(first[21..<86] != second[21..<86])
        #expect(Array(first[16..<21]) == [0, 0, 0x10, 0, 65])
        #expect(try WebPushEncryption.decrypt(body: first, userAgentPrivateKey: subscriber, authSecret: auth) == message)
        #expect(try WebPushEncryption.decrypt(body: second, userAgentPrivateKey: subscriber, authSecret: auth) == message)
    }

    @Test func largestPlaintextFillsExactly4096Bytes() throws {
        let subscriber = try P256PrivateKey.generate()
        let auth = SecureRandom.bytes(16)
        let largest = [UInt8](repeating: 0x41, count: WebPushEncryption.maximumPlaintextSize)
        let body = try WebPushEncryption.encrypt(plaintext: largest, userAgentPublicKey: subscriber.publicKey.x963Representation, authSecret: auth)
        #expect(body.count == 4096)
        #expect(try WebPushEncryption.decrypt(body: body, userAgentPrivateKey: subscriber, authSecret: auth) == largest)
        let error = #expect(throws: CryptoError.self) {
            try WebPushEncryption.encrypt(plaintext: largest + [0x41], userAgentPublicKey: subscriber.publicKey.x963Representation, authSecret: auth)
        }
        #expect(error?.code == .invalidInput)
    }

    @Test func rejectsBadInputs() throws {
        let userAgentKey = try P256PrivateKey(rawPrivateKey: RFC8291.uaPrivate, publicKey: RFC8291.uaPublic)
        func decryptError(_ body: [UInt8], auth: [UInt8] = RFC8291.authSecret) -> CryptoError.Code? {
            do {
                _ = try WebPushEncryption.decrypt(body: body, userAgentPrivateKey: userAgentKey, authSecret: auth)
                return nil
            } catch let error as CryptoError { return error.code } catch { return nil }
        }
        #expect(decryptError(RFC8291.body + [UInt8](repeating: 0, count: 4097 - RFC8291.body.count)) == .invalidInput)
        #expect(decryptError(Array(RFC8291.body.prefix(20))) == .invalidInput)
        var tampered = RFC8291.body
        tampered[tampered.count - 1] ^= 1
        #expect(decryptError(tampered) == .decryptionFailed)
        #expect(decryptError(RFC8291.body, auth: [UInt8](repeating: 1, count: 16)) == .decryptionFailed)
        var wrongID = RFC8291.body
        wrongID[20] = 64
        #expect(decryptError(wrongID) == .invalidInput)
        var smallRecord = RFC8291.body
        smallRecord[18] = 0
        smallRecord[19] = 20
        #expect(decryptError(smallRecord) == .invalidInput)
        #expect(decryptError(RFC8291.body, auth: [1, 2]) == .invalidInput)

        #expect(throws: CryptoError.self) {
            try WebPushEncryption.encrypt(plaintext: [1], userAgentPublicKey: [UInt8](repeating: 4, count: 65), authSecret: RFC8291.authSecret)
        }
        #expect(throws: CryptoError.self) {
            try WebPushEncryption.encrypt(plaintext: [1], userAgentPublicKey: RFC8291.uaPublic, authSecret: [1])
        }
        // A private scalar that does not belong to the public point is refused.
        #expect(throws: CryptoError.self) {
            try P256PrivateKey(rawPrivateKey: RFC8291.uaPrivate, publicKey: RFC8291.asPublic)
        }
    }

    @Test func hkdfMatchesRFC5869Case1() throws {
        let okm = try HKDFSHA256.deriveKey(inputKeyMaterial: [UInt8](repeating: 0x0b, count: 22),
                                           salt: bytes(hex: "000102030405060708090a0b0c"),
                                           info: bytes(hex: "f0f1f2f3f4f5f6f7f8f9"), length: 42)
        #expect(hex(okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }
}
