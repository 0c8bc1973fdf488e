import DeliveryCore
import Foundation
import Providers
import PushCrypto
import Testing

/// The fleet's token rules without I/O: when a shared token is used, replaced ahead of expiry, or replaced
/// after a refusal; and whose token a row is (fingerprint, sealing).
@Suite struct ProviderTokenPolicyTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func apnsToken(_ name: String = "A", age: Double, at now: Date = t0) -> SharedProviderToken {
        let issued = now.addingTimeInterval(-age)
        return SharedProviderToken(token: name, generation: 1, issuedAt: issued, expiresAt: issued.addingTimeInterval(3600))
    }

    @Test func apnsTokensAreReusedFor50MinutesAndReplacedAfter() {
        let policy = ProviderTokenPolicy.apns()
        #expect(policy.decide(current: nil, rejected: nil, at: Self.t0) == .mint)
        #expect(policy.decide(current: Self.apnsToken(age: 0), rejected: nil, at: Self.t0) == .use)
        #expect(policy.decide(current: Self.apnsToken(age: 2999), rejected: nil, at: Self.t0) == .use)
        #expect(policy.decide(current: Self.apnsToken(age: 3000), rejected: nil, at: Self.t0) == .mint)
        // Due but not expired: still usable while a refresh fails.
        #expect(policy.isUnexpired(Self.apnsToken(age: 3300), at: Self.t0))
        #expect(!policy.isUnexpired(Self.apnsToken(age: 3600), at: Self.t0))
        // A clock that went backwards keeps the token.
        #expect(policy.decide(current: Self.apnsToken(age: -600), rejected: nil, at: Self.t0) == .use)
    }

    @Test func aRefusedAPNsTokenIsReplacedOnlyWhileCurrentAndNeverWithin20Minutes() {
        let policy = ProviderTokenPolicy.apns()
        // Refused but younger than Apple's floor: kept (a new one would be TooManyProviderTokenUpdates).
        #expect(policy.decide(current: Self.apnsToken("A", age: 1199), rejected: "A", at: Self.t0) == .use)
        #expect(policy.decide(current: Self.apnsToken("A", age: 1200), rejected: "A", at: Self.t0) == .mint)
        // Another worker already replaced the refused token: the replacement is used, not replaced again.
        #expect(policy.decide(current: Self.apnsToken("B", age: 5), rejected: "A", at: Self.t0) == .use)
        // An expired token is replaced whatever the floor says.
        #expect(ProviderTokenPolicy.apns(minimumAge: 3600).decide(current: Self.apnsToken("A", age: 3600), rejected: "A", at: Self.t0) == .mint)
        // Shortened intervals for tests stay inside Apple's hour.
        #expect(ProviderTokenPolicy.apns(refreshAfter: 99_999).refreshAfter == 3600)
        #expect(ProviderTokenPolicy.apns(refreshAfter: .nan).refreshAfter == 3000)
    }

    @Test func fcmTokensAreReplacedAheadOfExpiryAndAtOnceWhenRefused() {
        let policy = ProviderTokenPolicy.fcm(refreshAhead: 300)
        let hour = SharedProviderToken(token: "A", generation: 3, issuedAt: Self.t0, expiresAt: Self.t0.addingTimeInterval(3600))
        #expect(policy.refreshAt(hour) == Self.t0.addingTimeInterval(3300))
        #expect(policy.decide(current: hour, rejected: nil, at: Self.t0.addingTimeInterval(3299)) == .use)
        #expect(policy.decide(current: hour, rejected: nil, at: Self.t0.addingTimeInterval(3300)) == .mint)
        // No floor: a refused access token is replaced at once, once.
        #expect(policy.decide(current: hour, rejected: "A", at: Self.t0.addingTimeInterval(1)) == .mint)
        #expect(policy.decide(current: hour, rejected: "old", at: Self.t0.addingTimeInterval(1)) == .use)
        // A short-lived token is refreshed at half its life, not on every use.
        let short = SharedProviderToken(token: "S", generation: 1, issuedAt: Self.t0, expiresAt: Self.t0.addingTimeInterval(100))
        #expect(policy.refreshAt(short) == Self.t0.addingTimeInterval(50))
    }

    @Test func huaweiTokensFollowTheAccessTokenRules() {
        let policy = ProviderTokenPolicy.huawei()
        #expect(policy.kind == .huawei && policy.kind.provider == .huawei && policy.minimumAge == 0)
        let hour = SharedProviderToken(token: "A", generation: 1, issuedAt: Self.t0, expiresAt: Self.t0.addingTimeInterval(3600))
        #expect(policy.refreshAt(hour) == Self.t0.addingTimeInterval(3300))
        #expect(policy.decide(current: hour, rejected: nil, at: Self.t0.addingTimeInterval(3299)) == .use)
        #expect(policy.decide(current: hour, rejected: "A", at: Self.t0.addingTimeInterval(1)) == .mint)
        #expect(policy.decide(current: hour, rejected: "old", at: Self.t0.addingTimeInterval(1)) == .use)
    }

    /// A Huawei client's row is keyed by client ID, token endpoint and secret, and sealed under the secret: a channel
    /// naming another app's client ID (no secret: it is the App ID) with a wrong secret never shares its token.
    @Test func aHuaweiTokenIsKeyedByItsClientAndSealedByItsSecret() throws {
        func credential(_ secret: String, clientID: String = "10086123", tokenURI: String? = nil) throws -> ProviderTokenCredential {
            var settings: [String: JSONValue] = ["app_id": "10086123", "client_id": .string(clientID), "client_secret": .string(secret)]
            if let tokenURI { settings["token_uri"] = .string(tokenURI) }
            return try ProviderTokenCredential(huawei: HuaweiClientCredentials(settings: .object(settings)))
        }
        let right = try credential("right-secret")
        let wrong = try credential("wrong-secret")
        #expect(right.kind == .huawei)
        #expect(right.fingerprint != wrong.fingerprint)
        #expect(right.fingerprint == (try credential("right-secret")).fingerprint)
        #expect(right.fingerprint != (try credential("right-secret", clientID: "10086124")).fingerprint)
        #expect(right.fingerprint != (try credential("right-secret", tokenURI: "https://oauth.example/token")).fingerprint)
        let sealed = try right.seal("DAEDA.token")
        #expect(right.open(sealed) == "DAEDA.token")
        #expect(try credential("right-secret").open(sealed) == "DAEDA.token")
        #expect(wrong.open(sealed) == nil)
        #expect(!right.description.contains("secret"))
    }

    static func apnsCredentials(_ key: P256PrivateKey, keyID: String = "KEY1234567") -> APNsCredentials {
        APNsCredentials(teamID: "TEAM123456", keyID: keyID, privateKey: key, topic: "dev.pushizo.test")
    }

    @Test func theFingerprintNamesTheKeyNotJustItsID() throws {
        let keyA = try P256PrivateKey.generate()
        let keyB = try P256PrivateKey.generate()
        let a = try ProviderTokenCredential(apns: Self.apnsCredentials(keyA))
        let again = try ProviderTokenCredential(apns: Self.apnsCredentials(keyA))
        let b = try ProviderTokenCredential(apns: Self.apnsCredentials(keyB))
        let otherID = try ProviderTokenCredential(apns: Self.apnsCredentials(keyA, keyID: "KEY7654321"))
        #expect(a.fingerprint == again.fingerprint)
        #expect(a.fingerprint != b.fingerprint)
        #expect(a.fingerprint != otherID.fingerprint)
        // base64url of 32 bytes; no key text in it or in the description.
        #expect(a.fingerprint.count == 43)
        #expect(!a.description.contains("PRIVATE"))
    }

    @Test func aSealedTokenOpensOnlyForItsOwnCredential() throws {
        let keyA = try P256PrivateKey.generate()
        let a = try ProviderTokenCredential(apns: Self.apnsCredentials(keyA))
        let sameKeyAgain = try ProviderTokenCredential(apns: Self.apnsCredentials(keyA))
        // A different key under the same team and key id (a rotated .p8 kept under the old id).
        let b = try ProviderTokenCredential(apns: Self.apnsCredentials(try P256PrivateKey.generate()))
        let sealed = try a.seal("eyJhbGciOiJFUzI1NiJ9.e30.sig")
        #expect(!String(decoding: sealed, as: UTF8.self).contains("eyJ"))
        #expect(sameKeyAgain.open(sealed) == "eyJhbGciOiJFUzI1NiJ9.e30.sig")
        #expect(b.open(sealed) == nil)
        var damaged = sealed
        damaged[damaged.count - 1] ^= 1
        #expect(a.open(damaged) == nil)
        #expect(a.open(Array(sealed.prefix(20))) == nil)
        // Two seals of one token differ (fresh nonce).
        #expect(try a.seal("x") != (try a.seal("x")))
    }

    @Test func serviceAccountsAreFingerprintedByAccountAndKey() throws {
        let key = try RSAPrivateKey.generate()
        func account(_ email: String, _ key: RSAPrivateKey) -> GoogleServiceAccount {
            GoogleServiceAccount(projectID: "p", clientEmail: email, tokenURI: "https://oauth2.googleapis.com/token", privateKey: key)
        }
        let a = try ProviderTokenCredential(fcm: account("a@p.iam.gserviceaccount.com", key))
        #expect(a.fingerprint == (try ProviderTokenCredential(fcm: account("a@p.iam.gserviceaccount.com", key))).fingerprint)
        #expect(a.fingerprint != (try ProviderTokenCredential(fcm: account("b@p.iam.gserviceaccount.com", key))).fingerprint)
        let rotated = try ProviderTokenCredential(fcm: account("a@p.iam.gserviceaccount.com", try RSAPrivateKey.generate()))
        #expect(a.fingerprint != rotated.fingerprint)
        #expect(rotated.open(try a.seal("ya29.token")) == nil)
        #expect(a.kind == .fcm)
    }
}
