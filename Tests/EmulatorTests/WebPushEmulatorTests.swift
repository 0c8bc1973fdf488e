import DeliveryCore
import Foundation
import Providers
import PushCrypto
import Testing
@testable import Emulator

/// The Web Push emulator's checks, fed requests built with the real sealer (RFC 8291 + RFC 8292).
@Suite struct WebPushEmulatorTests {
    static let seed = "unit-seed"
    static let origin = "https://push.example:8443"
    let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
    let emulator: WebPushEmulator
    let vapidKey: P256PrivateKey

    init() throws {
        let clock = clock
        emulator = WebPushEmulator(seed: Self.seed, now: { clock.now })
        vapidKey = try P256PrivateKey.generate()
    }

    /// A sealed request for subscription `id`, signed for `audience`, with `exp` `lifetime` seconds ahead.
    func request(
        _ id: String, plaintext: [UInt8] = Array(#"{"msgId":"m","title":"Hi"}"#.utf8), audience: String = origin,
        lifetime: Double = 43_200, headers: [PushHeader]? = nil, authority: String = "push.example:8443"
    ) throws -> EmulatorRequest {
        let subscription = try WebPushEmulatorSubscriptions(seed: Self.seed).subscription(id: id)
        let clock = clock
        let vapid = VAPIDTokenManager(
            privateKey: vapidKey, subject: try VAPIDSubject("mailto:ops@pushizo.example"), lifetime: lifetime,
            now: { clock.now })
        let endpoint = try WebPushEndpoint(parsing: subscription.endpoint(origin: audience))
        let plain = PushRequest(
            method: "POST", path: subscription.path, headers: headers ?? [PushHeader("ttl", "60"), PushHeader("urgency", "high")],
            body: plaintext)
        let sealed = try WebPushRequestSealer.seal(
            plain, endpoint: endpoint, p256dh: subscription.p256dh, auth: subscription.auth, vapid: vapid)
        return EmulatorRequest(
            method: "POST", path: sealed.path, authority: authority,
            headers: sealed.headers.map { EmulatorHeader($0.name, $0.value) }, body: sealed.body)
    }

    func message(_ response: EmulatorResponse) -> String {
        ((try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["message"] as? String) ?? ""
    }

    @Test func subscriptionsAreDeterministicPerSeedAndID() throws {
        let a = try WebPushEmulatorSubscriptions(seed: "s").subscription(id: "abc")
        let b = try WebPushEmulatorSubscriptions(seed: "s").subscription(id: "abc")
        let c = try WebPushEmulatorSubscriptions(seed: "t").subscription(id: "abc")
        let d = try WebPushEmulatorSubscriptions(seed: "s").subscription(id: "abd")
        #expect(a.p256dh == b.p256dh && a.auth == b.auth)
        #expect(a.p256dh != c.p256dh && a.auth != c.auth)
        #expect(a.p256dh != d.p256dh)
        #expect(Base64URL.decode(a.p256dh)?.count == 65)
        #expect(Base64URL.decode(a.auth)?.count == 16)
        #expect(a.endpoint(origin: "https://h:1") == "https://h:1/wpush/abc")
        #expect(throws: CryptoError.self) { try WebPushEmulatorSubscriptions(seed: "s").subscription(id: "a/b") }
    }

    @Test func acceptsAndDecrypts() throws {
        let response = emulator.handle(try request("okay"))
        #expect(response.status == 201)
        let location = try #require(response.header("location"))
        #expect(location.hasPrefix("https://push.example:8443/wpush-message/"))
        let accepted = try #require(emulator.acceptedMessages.first)
        #expect(String(decoding: accepted.plaintext, as: UTF8.self) == #"{"msgId":"m","title":"Hi"}"#)
        #expect(accepted.ttl == 60 && accepted.urgency == "high" && accepted.subject == "mailto:ops@pushizo.example")
        #expect(accepted.jsonLine.contains(#""payload":{"msgId":"m","title":"Hi"}"#))
    }

    @Test func defaultPortAuthorityMatchesAnOriginWithoutPort() throws {
        let response = emulator.handle(try request("okay", audience: "https://push.example", authority: "push.example:443"))
        #expect(response.status == 201)
    }

    @Test func refusesTheWrongAudience() throws {
        let response = emulator.handle(try request("okay", audience: "https://other.example:8443"))
        #expect(response.status == 401)
        #expect(message(response).contains("aud"))
    }

    @Test func refusesAnExpiredToken() throws {
        let request = try request("okay", lifetime: 60)
        clock.advance(61)
        let response = emulator.handle(request)
        #expect(response.status == 401)
        #expect(message(response).contains("expired"))
    }

    @Test func refusesATokenMoreThan24HoursAhead() throws {
        // The manager clamps to 12 h, so forge one by hand: exp 25 h ahead.
        let exp = Int64(clock.now.timeIntervalSince1970) + 90_000
        let jwt = try JSONWebToken.signES256(
            header: ["typ": "JWT"], claims: ["aud": .string(Self.origin), "exp": .int(exp), "sub": "mailto:a@b.example"], key: vapidKey)
        var good = try request("okay")
        good.headers = good.headers.map {
            $0.name == "authorization" ? EmulatorHeader("authorization", "vapid t=\(jwt), k=\(Base64URL.encode(vapidKey.publicKey.x963Representation))") : $0
        }
        let response = emulator.handle(good)
        #expect(response.status == 401)
        #expect(message(response).contains("24 hours"))
    }

    @Test func refusesASignatureByAnotherKey() throws {
        var good = try request("okay")
        let other = try P256PrivateKey.generate()
        good.headers = good.headers.map { header in
            guard header.name == "authorization" else { return header }
            let k = Base64URL.encode(other.publicKey.x963Representation)
            let t = header.value.components(separatedBy: "t=")[1].components(separatedBy: ",")[0]
            return EmulatorHeader("authorization", "vapid t=\(t), k=\(k)")
        }
        let response = emulator.handle(good)
        #expect(response.status == 401)
        #expect(message(response).contains("signature"))
        #expect(emulator.handle(EmulatorRequest(method: "POST", path: "/wpush/okay", headers: [], body: [])).status == 401)
    }

    @Test func requiresTTLEncodingAndADecryptableJSONBody() throws {
        #expect(emulator.handle(try request("okay", headers: [])).status == 400)
        var plain = try request("okay")
        plain.headers.removeAll { $0.name == "content-encoding" }
        #expect(emulator.handle(plain).status == 415)
        var tampered = try request("okay")
        tampered.body[tampered.body.count - 1] ^= 1
        #expect(emulator.handle(tampered).status == 400)
        // Encrypted for another subscription: the keys differ.
        var misdirected = try request("okay")
        misdirected.path = "/wpush/other"
        #expect(emulator.handle(misdirected).status == 400)
        #expect(emulator.handle(try request("okay", plaintext: Array("not json".utf8))).status == 400)
        var huge = try request("okay")
        huge.body += [UInt8](repeating: 0, count: 4097 - huge.body.count)
        #expect(emulator.handle(huge).status == 413)
        #expect(emulator.acceptedCount == 0)
    }

    /// A body with `web_push` must have the form Safari parses (WebKit, "Meet Declarative Web Push"); the
    /// answer names what is wrong, and a valid one is accepted as sent.
    @Test func declarativeMessagesAreCheckedForTheFormSafariParses() throws {
        let valid = #"{"notification":{"app_badge":3,"body":"b","data":{"msgId":"m"},"dir":"rtl","lang":"ar","mutable":true,"navigate":"https://a.example/x","silent":false,"title":"T"},"web_push":8030}"#
        #expect(emulator.handle(try request("okay", plaintext: Array(valid.utf8))).status == 201)
        #expect(emulator.handle(try request("okay", plaintext: Array(#"{"notification":{"app_badge":"12","navigate":"https://a.example/","title":"T"},"web_push":8030}"#.utf8))).status == 201)
        let refused: [(String, String)] = [
            (#"{"notification":{"navigate":"https://a.example/","title":"T"},"web_push":"8030"}"#, "web_push"),
            (#"{"notification":{"navigate":"https://a.example/","title":"T"},"web_push":8031}"#, "web_push"),
            (#"{"web_push":8030}"#, "notification object"),
            (#"{"notification":{"navigate":"https://a.example/"},"web_push":8030}"#, "title"),
            (#"{"notification":{"navigate":"https://a.example/","title":""},"web_push":8030}"#, "title"),
            (#"{"notification":{"title":"T"},"web_push":8030}"#, "navigate"),
            (#"{"notification":{"navigate":"/relative","title":"T"},"web_push":8030}"#, "navigate"),
            (#"{"notification":{"dir":"up","navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "dir"),
            (#"{"notification":{"lang":1,"navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "lang"),
            (#"{"notification":{"mutable":"yes","navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "mutable"),
            (#"{"notification":{"silent":1,"navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "silent"),
            (#"{"notification":{"app_badge":-1,"navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "app_badge"),
            (#"{"notification":{"app_badge":"1a","navigate":"https://a.example/","title":"T"},"web_push":8030}"#, "app_badge"),
        ]
        for (body, member) in refused {
            let response = emulator.handle(try request("okay", plaintext: Array(body.utf8)))
            #expect(response.status == 400, "\(body)")
            #expect(String(decoding: response.body, as: UTF8.self).contains(member), "\(body)")
        }
        #expect(emulator.acceptedCount == 2)
    }

    /// RFC 8030 §5.3 (urgency values) and §5.4 (topic: at most 32 characters of the URL-safe base64
    /// alphabet; and decodable, as Apple's service demands): anything else is a 400, and a valid one is
    /// recorded as sent.
    @Test func urgencyAndTopicAreChecked() throws {
        func status(_ extra: [PushHeader]) throws -> Int {
            emulator.handle(try request("okay", headers: [PushHeader("ttl", "60")] + extra)).status
        }
        for urgency in ["very-low", "low", "normal", "high"] { #expect(try status([PushHeader("urgency", urgency)]) == 201) }
        for urgency in ["urgent", "HIGH", ""] { #expect(try status([PushHeader("urgency", urgency)]) == 400, "\(urgency)") }
        for topic in ["ab", "order-1", "promo-12", String(repeating: "A", count: 32)] {
            #expect(try status([PushHeader("topic", topic)]) == 201, "\(topic)")
        }
        for topic in ["promo", "a", "order:1", "a=", String(repeating: "A", count: 33), ""] {
            #expect(try status([PushHeader("topic", topic)]) == 400, "\(topic)")
        }
        // What the worker derives for "promo" is accepted.
        #expect(try status([PushHeader("topic", try #require(WebPushRequestFactory.topic(for: "promo")))]) == 201)
        #expect(emulator.acceptedMessages.last?.topic == "vO8RtqPt7XudSoF_0G-I_DAotWDbWJPi")
    }

    /// RFC 8030 §5: "A 201 (Created) response indicates that the push message was accepted. A URI for the
    /// push message resource that was created in response to the request is included in the Location
    /// header field." §5.2: the push service returns the (possibly shortened) `TTL` it kept.
    @Test func successIsCreatedWithLocationAndTTL() throws {
        let response = emulator.handle(try request("okay", headers: [PushHeader("ttl", "60")]))
        #expect(response.status == 201)
        #expect(response.header("location")?.hasPrefix("https://push.example:8443/wpush-message/") == true)
        #expect(response.header("ttl") == "60")
        #expect(response.body.isEmpty)
    }

    @Test func conventions() throws {
        for (id, status) in [("e400x", 400), ("e401x", 401), ("e403x", 403), ("e404x", 404), ("e410x", 410),
                             ("e413x", 413), ("e500x", 500), ("e599x", 503)] {
            #expect(emulator.handle(try request(id)).status == status, "\(id)")
            #expect(emulator.handle(try request(id)).status == status, "\(id) again")
        }
        let limited = emulator.handle(try request("e429x"))
        #expect(limited.status == 429)
        #expect(limited.header("retry-after") == "1")
        #expect(emulator.handle(try request("e429x")).status == 201)
        #expect(emulator.handle(try request("e503x")).status == 503)
        #expect(emulator.handle(try request("e503x")).status == 201)
        // Microsoft's push service throttles with 406 and a Retry-After; the worker retries no earlier.
        let throttled = emulator.handle(try request("e406x"))
        #expect(throttled.status == 406)
        #expect(throttled.header("retry-after") == "900")
        let response = PushResponse(status: throttled.status, headers: throttled.headers.map { PushHeader($0.name, $0.value) }, body: throttled.body)
        guard case .retry(.rateLimited, _, let notBefore) = WebPushResponseClassifier.classify(response, now: clock.now) else {
            Issue.record("a 406 is a throttle, retried")
            return
        }
        #expect(notBefore == clock.now.addingTimeInterval(900))
        #expect(emulator.handle(try request("e406x")).status == 201)
    }
}
