import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

@Suite struct WebPushVAPIDTests {
    let key: P256PrivateKey
    init() throws { key = try P256PrivateKey.generate() }

    @Test func headerTokenAndClaimsVerifyWithOpenSSL() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000.9))
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("mailto:push@example.com"), now: { clock.now })
        let endpoint = try WebPushEndpoint(parsing: "https://Push.Example.net:8443/wpush/v2/abc?x=1")
        let header = try manager.authorization(for: endpoint)
        let (token, publicKey) = try VAPIDTokenManager.parseAuthorization(header)
        #expect(header == "vapid t=\(token), k=\(Base64URL.encode(key.publicKey.x963Representation))")
        #expect(publicKey == key.publicKey.x963Representation)
        let decoded = try JSONWebToken.decode(token)
        #expect(String(decoding: decoded.header, as: UTF8.self) == #"{"alg":"ES256","typ":"JWT"}"#)
        #expect(String(decoding: decoded.claims, as: UTF8.self)
            == #"{"aud":"https://push.example.net:8443","exp":1700043200,"sub":"mailto:push@example.com"}"#)
        let signer = try P256PublicKey(x963: publicKey)
        #expect(signer.verifyES256(signature: decoded.signature, for: decoded.signingInput))
        // Another key does not verify it.
        #expect(!(try P256PrivateKey.generate()).publicKey.verifyES256(signature: decoded.signature, for: decoded.signingInput))
    }

    @Test func defaultPortOriginHasNoPort() throws {
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("https://example.com/contact"))
        let token = try manager.token(origin: try WebPushEndpoint(parsing: "https://fcm.googleapis.com:443/fcm/send/x").origin)
        let claims = String(decoding: try JSONWebToken.decode(token).claims, as: UTF8.self)
        #expect(claims.contains(#""aud":"https://fcm.googleapis.com","#))
        #expect(claims.contains(#""sub":"https://example.com/contact""#))
    }

    @Test func reusedPerOriginThenRefreshedWithAnHourLeft() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("mailto:a@example.com"), now: { clock.now })
        let first = try manager.token(origin: "https://a.example")
        let other = try manager.token(origin: "https://b.example")
        #expect(first != other)
        clock.advance(10 * 3600)
        #expect(try manager.token(origin: "https://a.example") == first)
        clock.advance(3600 - 1)  // 1 h 1 s left
        #expect(try manager.token(origin: "https://a.example") == first)
        clock.advance(2)  // under 1 h left
        let second = try manager.token(origin: "https://a.example")
        #expect(second != first)
        let exp = try #require(String(decoding: try JSONWebToken.decode(second).claims, as: UTF8.self)
            .firstMatch(of: /"exp":(\d+)/)).1
        #expect(Int(exp) == 1_700_000_000 + 11 * 3600 + 1 + 43_200)
        #expect(try manager.token(origin: "https://a.example") == second)
    }

    @Test func lifetimeIsCappedAt12Hours() throws {
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("mailto:a@example.com"), lifetime: 86_400,
                                        now: { Date(timeIntervalSince1970: 1_000) })
        let claims = String(decoding: try JSONWebToken.decode(try manager.token(origin: "https://a.example")).claims, as: UTF8.self)
        #expect(claims.contains(#""exp":44200"#))
    }

    @Test(arguments: [
        "mailto:ops@example.com", "MAILTO:ops@example.com", "https://example.com", "https://example.com/contact?x=1",
        " mailto:ops@sub.example.org ",
    ])
    func acceptedSubjects(_ text: String) throws {
        #expect(try VAPIDSubject(text).value == text.trimmingCharacters(in: .whitespaces))
    }

    @Test(arguments: [
        "", "ops@example.com", "http://example.com", "mailto:", "mailto:@example.com", "mailto:ops@", "mailto:a@b.com,c@d.com",
        "mailto:ops@localhost", "mailto:ops@printer.local", "mailto:ops@x.invalid", "mailto:ops@x.test", "mailto:ops@LOCALHOST.",
        "https://localhost", "https://localhost:8443/x", "https://dev.local", "https://example.test", "https://a.b.invalid",
        "https://app.localhost", "https://", "https://user:pw@example.com", "mailto:ops @example.com", "mailto:é@example.com",
        "ftp://example.com", "javascript:alert(1)",
    ])
    func refusedSubjects(_ text: String) {
        let error = #expect(throws: VAPIDError.self) { try VAPIDSubject(text) }
        #expect(error?.code == .invalidSubject)
    }

    @Test func refusesNonOriginAudiences() throws {
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("mailto:a@example.com"))
        for audience in ["http://a.example", "https://a.example/path", "https://", "https://A.example", "https://a.example?x", "https://u@a.example"] {
            let error = #expect(throws: VAPIDError.self) { try manager.token(origin: audience) }
            #expect(error?.code == .invalidAudience)
        }
    }

    @Test func parseRefusesMalformedHeaders() {
        let key = Base64URL.encode([4] + [UInt8](repeating: 1, count: 64))
        #expect((try? VAPIDTokenManager.parseAuthorization("Vapid k=\(key) , t=a.b.c"))?.token == "a.b.c")
        for header in ["Bearer a.b.c", "vapid t=a.b.c", "vapid k=\(key)", "vapid t=a.b.c, k=AAAA", "vapid t=a.b.c, t=x, k=\(key)",
                       "vapid t=a.b.c, k=\(key), x=1", "vapid t", String(repeating: "v", count: 5000)] {
            #expect(throws: VAPIDError.self) { try VAPIDTokenManager.parseAuthorization(header) }
        }
    }

    @Test func concurrentCallersShareOneToken() async throws {
        let manager = VAPIDTokenManager(privateKey: key, subject: try VAPIDSubject("mailto:a@example.com"))
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<20 { group.addTask { try manager.token(origin: "https://a.example") } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1)
    }
}
