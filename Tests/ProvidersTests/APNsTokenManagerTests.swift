import Foundation
import Synchronization
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let current: Mutex<Date>
    init(_ start: Date) { current = Mutex(start) }
    var now: Date { current.withLock { $0 } }
    func advance(_ seconds: Double) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

@Suite struct APNsTokenManagerTests {
    let key: P256PrivateKey
    init() throws { key = try P256PrivateKey.generate() }

    func claims(_ token: String) throws -> [String: Any] {
        let decoded = try JSONWebToken.decode(token)
        return try #require(try JSONSerialization.jsonObject(with: Data(decoded.claims)) as? [String: Any])
    }

    @Test func tokenShapeAndSignature() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000.75))
        let manager = APNsTokenManager(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", privateKey: key, now: { clock.now })
        let token = try manager.bearerToken()
        let decoded = try JSONWebToken.decode(token)
        #expect(String(decoding: decoded.header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: decoded.claims, as: UTF8.self) == #"{"iat":1700000000,"iss":"DEF123GHIJ"}"#)
        #expect(decoded.signature.count == 64)
        #expect(key.publicKey.verifyES256(signature: decoded.signature, for: decoded.signingInput))
    }

    @Test func sameTokenWithinLifetimeThenRefreshAfter50Minutes() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        let manager = APNsTokenManager(teamID: "T", keyID: "K", privateKey: key, now: { clock.now })
        let first = try manager.bearerToken()
        clock.advance(60)
        #expect(try manager.bearerToken() == first)
        clock.advance(2_939)  // 49 min 59 s after issue
        #expect(try manager.bearerToken() == first)
        clock.advance(1)      // 50 min
        let second = try manager.bearerToken()
        #expect(second != first)
        #expect(try claims(second)["iat"] as? Int == 1_700_003_000)
        #expect(try manager.bearerToken() == second)
    }

    @Test func invalidateRespectsTheTwentyMinuteFloor() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        let manager = APNsTokenManager(teamID: "T", keyID: "K", privateKey: key, now: { clock.now })
        let first = try manager.bearerToken()
        clock.advance(300)
        manager.invalidate()
        #expect(try manager.bearerToken() == first, "5 minutes after issue: too soon for a new token")
        clock.advance(899)  // 19 min 59 s
        #expect(try manager.bearerToken() == first)
        clock.advance(1)    // 20 min
        let second = try manager.bearerToken()
        #expect(second != first)
        // After a refresh the normal lifetime applies again.
        clock.advance(1_500)
        #expect(try manager.bearerToken() == second)
        // Invalidating an already old token refreshes at once.
        clock.advance(1_000)
        manager.invalidate()
        #expect(try manager.bearerToken() != second)
    }

    @Test func concurrentCallersShareOneToken() async throws {
        let manager = APNsTokenManager(teamID: "T", keyID: "K", privateKey: key)
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<16 { group.addTask { try manager.bearerToken() } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1)
    }
}

@Suite struct APNsCredentialsTests {
    @Test func readsSettings() throws {
        let key = try P256PrivateKey.generate()
        let credentials = try APNsCredentials(settings: [
            "team_id": "DEF123GHIJ", "key_id": "ABC123DEFG", "private_key": .string(key.pkcs8PEM), "topic": "com.example.app",
        ])
        #expect(credentials.teamID == "DEF123GHIJ" && credentials.keyID == "ABC123DEFG" && credentials.topic == "com.example.app")
        #expect(credentials.privateKey.publicKey == key.publicKey)
        #expect(!credentials.description.contains("PRIVATE"))
        #expect(credentials.description.contains("<redacted>"))
        // Escaped line breaks are repaired.
        let escaped = key.pkcs8PEM.replacingOccurrences(of: "\n", with: "\\n")
        let repaired = try APNsCredentials(settings: ["team_id": "T1", "key_id": "K1", "private_key": .string(escaped), "topic": "t"])
        #expect(repaired.privateKey.publicKey == key.publicKey)
    }

    @Test func errorsNameTheKeyAndNeverThePEM() throws {
        let pem = try P256PrivateKey.generate().pkcs8PEM
        let base: [String: JSONValue] = ["team_id": "T1", "key_id": "K1", "private_key": .string(pem), "topic": "t"]
        for (key, value) in [("team_id", JSONValue.null), ("key_id", ""), ("topic", 5), ("team_id", "has space")] {
            var settings = base
            settings[key] = value
            let error = try #require(throws: ProviderConfigurationError.self) { try APNsCredentials(settings: .object(settings)) }
            #expect(error.key == key)
        }
        var broken = base
        let mangled = pem.replacingOccurrences(of: "M", with: "*")
        broken["private_key"] = .string(mangled)
        let error = try #require(throws: ProviderConfigurationError.self) { try APNsCredentials(settings: .object(broken)) }
        #expect(error.key == "private_key")
        let body = mangled.split(separator: "\n")[1]
        #expect(!error.description.contains(body))
        #expect(throws: ProviderConfigurationError.self) { try APNsCredentials(settings: "x") }
    }
}
