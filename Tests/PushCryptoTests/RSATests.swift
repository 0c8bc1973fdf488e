import Foundation
import PushCrypto
import Testing

@Suite("RS256 (RSA PKCS#1 v1.5, SHA-256)")
struct RSATests {
    /// A throwaway 1024-bit key (too short for RS256), made with `openssl genpkey` for this test only.
    static let shortKeyPEM = """
    -----BEGIN PRIVATE KEY-----
    MIICeAIBADANBgkqhkiG9w0BAQEFAASCAmIwggJeAgEAAoGBAOX2yh9wiy78CbF1
    ZcOOR6AY6WwrY/q898wCHSlhiiTrTW8gwBrbUGwLlvXaihhvs8FCSsxkweTVPMXB
    g/WCnUpi9R0YemL7z3mlUNDk2Bb0vaYTTpIC9GkIeu1ugL020eF0aFHwXArKdAiV
    ZvKceOlO8ww8jGEukJS6j+c0H8cnAgMBAAECgYEAmcLFqvfpWGUVZh6FCJids6J0
    kOsCUqj/Vt0i+oRJhh3/DIrtaAe0Ykntij2xkF0/57yXnsrQCl254NBfl0zaNZos
    l31izv5vuyCJWNHQvl+bZNUEdOv/V0jOzFKnvO+dZuLgEsqfKgyMClDCK6n1DuJz
    E5l5HNJaj1hEhBpVOWECQQD2KGle2LEBdIOuplx73+5npY3WnPfs5/leHIv3EI0e
    Ky/X7I4CFCXy2qtJMorwKGO/rEzjlb6HvKVsqmPyE4IrAkEA7yifkfBT0deTLx72
    FfS43zM5BTuyhtiQDZoOjBhxNEg/bpgZ9QvVWcWVfmufMgwYJuziX5iKg+tRCZd7
    1Wac9QJAGOBGncYqRSpgMGMxj3c24ZSSe/DLAU8EHWWnI2WxzS2yHRET3NPqbdt5
    WeFYtyJtyi4AazNz2MXQteWWSh18lwJBAJ+MIVAR3UlLoLQ52n/xP/gfSvXzynjt
    NsTsNrI9iCAR5sdYD1EL8OwvxTiOgai4qtAlDiwqLpYtQWW9um42Q5UCQQDGZAr5
    RI3KoT7vYchgjAS232MFN8QCBYA55lMmTOi1m+4MMmbko2z/eecnkuGIeEEeFT7N
    Fyv2c9Los6OzD03M
    -----END PRIVATE KEY-----
    """

    @Test func signVerifyRoundTripThroughPEM() throws {
        let generated = try RSAPrivateKey.generate()
        let key = try RSAPrivateKey(pem: generated.pkcs8PEM)
        #expect(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let message = Array("header.claims".utf8)
        let signature = try key.signRS256(message)
        #expect(signature.count == 256)
        // PKCS#1 v1.5 is deterministic.
        #expect(try key.signRS256(message) == signature)
        let publicKey = try RSAPublicKey(pem: generated.publicKey.pem)
        #expect(publicKey.verifyRS256(signature: signature, for: message))
        #expect(!publicKey.verifyRS256(signature: signature, for: Array("header.claimz".utf8)))
        var tampered = signature
        tampered[10] ^= 1
        #expect(!publicKey.verifyRS256(signature: tampered, for: message))
        #expect(!publicKey.verifyRS256(signature: [], for: message))
        #expect(!publicKey.verifyRS256(signature: [UInt8](repeating: 0, count: 9000), for: message))
        #expect(!(try RSAPrivateKey.generate()).publicKey.verifyRS256(signature: signature, for: message))
        #expect("\(key)" == "RSAPrivateKey(<redacted>)")
    }

    @Test func jwtRS256VerifiesWithThePublicKey() throws {
        let key = try RSAPrivateKey.generate()
        let token = try JSONWebToken.signRS256(header: ["typ": "JWT"], claims: ["iss": "a@b.iam.gserviceaccount.com", "iat": 1], key: key)
        let decoded = try JSONWebToken.decode(token)
        #expect(String(decoding: decoded.header, as: UTF8.self) == #"{"alg":"RS256","typ":"JWT"}"#)
        #expect(String(decoding: decoded.claims, as: UTF8.self) == #"{"iat":1,"iss":"a@b.iam.gserviceaccount.com"}"#)
        #expect(key.publicKey.verifyRS256(signature: decoded.signature, for: decoded.signingInput))
    }

    @Test func refusesShortNonRSAAndGarbageKeys() throws {
        let short = #expect(throws: CryptoError.self) { try RSAPrivateKey(pem: Self.shortKeyPEM) }
        #expect(short?.code == .invalidKey)
        #expect(short?.message.contains("MIIC") == false)
        let ec = try P256PrivateKey.generate()
        #expect(throws: CryptoError.self) { try RSAPrivateKey(pem: ec.pkcs8PEM) }
        #expect(throws: CryptoError.self) { try RSAPublicKey(pem: ec.publicKey.pem) }
        #expect(throws: CryptoError.self) { try RSAPrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n") }
        #expect(throws: CryptoError.self) { try RSAPrivateKey(pem: "") }
        #expect(throws: CryptoError.self) { try RSAPrivateKey.generate(bits: 1024) }
    }
}
