import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

/// Web Push as the real push services need it: endpoint hosts in every valid form, keys in either base64
/// alphabet, valid topics, the per-service headers (docs/web-push.md, "Push services and their quirks").
@Suite struct WebPushServiceQuirksTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    func request(_ message: JSONValue, endpoint: String) throws -> PushRequest {
        try WebPushRequestFactory.makePlaintextRequest(WebPushDelivery(
            endpoint: endpoint, message: try NotificationMessage(json: message), appDefaultLanguage: "en", msgID: "M", now: Self.now))
    }

    // MARK: Hosts (IDNA A-labels stay ASCII)

    @Test func anALabelHostIsKeptAsWritten() throws {
        let endpoint = try WebPushEndpoint(parsing: "https://push.xn--e1afmkfd.com/wpush/v2/abc")
        #expect(endpoint.host == "push.xn--e1afmkfd.com")
        #expect(endpoint.origin == "https://push.xn--e1afmkfd.com", "the VAPID aud")
        #expect(endpoint.path == "/wpush/v2/abc")
        // Upper case is lower-cased, nothing else changes.
        #expect(try WebPushEndpoint(parsing: "https://PUSH.XN--E1AFMKFD.COM:8443/x").origin == "https://push.xn--e1afmkfd.com:8443")
        // An A-label Foundation cannot decode is still a valid ASCII host (RFC 3986 reg-name).
        #expect(try WebPushEndpoint(parsing: "https://xn--zz.example/x").host == "xn--zz.example")
    }

    @Test func aUnicodeHostBecomesItsALabels() throws {
        // UTS #46 through Foundation (ICU): the vectors are the A-labels of RFC 3492-encoded names.
        #expect(try WebPushEndpoint(parsing: "https://push.пример.com/x").host == "push.xn--e1afmkfd.com")
        #expect(try WebPushEndpoint(parsing: "https://Bücher.example/x").host == "xn--bcher-kva.example")
        #expect(try WebPushEndpoint(parsing: "https://faß.de/x").host == "xn--fa-hia.de", "non-transitional, as the WHATWG URL Standard")
        // RFC 3492 §7.1 sample strings: (B) Chinese (simplified), and (L) "3<nen>B<gumi><kinpachi><sensei>",
        // whose "B" UTS #46 lower-cases first (Punycode keeps the case of basic code points).
        #expect(try WebPushEndpoint(parsing: "https://他们为什么不说中文.example/x").host == "xn--ihqwcrb4cv8a8dqg056pqjye.example")
        #expect(try WebPushEndpoint(parsing: "https://3年B組金八先生.example/x").host == "xn--3b-ww4c5e180e575a65lsy2b.example")
    }

    @Test func trailingDotBracketsAndPercentSigns() throws {
        let dotted = try WebPushEndpoint(parsing: "https://push.example.com./x")
        #expect(dotted.host == "push.example.com" && dotted.origin == "https://push.example.com")
        let v6 = try WebPushEndpoint(parsing: "https://[2001:db8::1]:8443/x")
        #expect(v6.host == "2001:db8::1")
        #expect(v6.origin == "https://[2001:db8::1]:8443")
        let error = try #require(throws: WebPushRequestError.self) { try WebPushEndpoint(parsing: "https://ex%41mple.com/secret") }
        #expect(error.reason == DeliveryReason.invalidEndpoint && !error.detail.contains("secret"))
    }

    // MARK: Keys in either base64 alphabet

    @Test func keysInEitherAlphabetWithOrWithoutPadding() throws {
        let subscriber = try P256PrivateKey.generate()
        let auth = SecureRandom.bytes(16)
        let point = subscriber.publicKey.x963Representation
        let standard = Data(point).base64EncodedString()  // `+`, `/`, `=` as many backends store it
        let standardAuth = Data(auth).base64EncodedString()
        let vapid = VAPIDTokenManager(privateKey: try P256PrivateKey.generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let endpoint = try WebPushEndpoint(parsing: "https://updates.push.services.mozilla.com/wpush/v2/abc")
        let plain = PushRequest(path: endpoint.path, headers: [PushHeader("ttl", "60")], body: Array(#"{"msgId":"M"}"#.utf8))
        for (p256dh, secret) in [
            (standard, standardAuth),
            (standard.replacingOccurrences(of: "=", with: ""), standardAuth.replacingOccurrences(of: "=", with: "")),
            (Base64URL.encode(point), Base64URL.encode(auth)),
            (Base64URL.encode(point) + "=", Base64URL.encode(auth) + "=="),
        ] {
            let sealed = try WebPushRequestSealer.seal(plain, endpoint: endpoint, p256dh: p256dh, auth: secret, vapid: vapid)
            #expect(try WebPushEncryption.decrypt(body: sealed.body, userAgentPrivateKey: subscriber, authSecret: auth) == plain.body)
        }
    }

    @Test func keyDecodingRules() {
        // 0xfb 0xff 0xbf: "+/+/" in standard base64, "-_-_" in base64url.
        #expect(WebPushRequestSealer.subscriptionKeyBytes("+/+/") == [0xfb, 0xff, 0xbf])
        #expect(WebPushRequestSealer.subscriptionKeyBytes("-_-_") == [0xfb, 0xff, 0xbf])
        #expect(WebPushRequestSealer.subscriptionKeyBytes("+_-/") == [0xfb, 0xff, 0xbf], "mixed, as the libraries map it")
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AQ==") == [1])
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AQ") == [1])
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AQ=") == nil, "padding must complete a quantum")
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AQ===") == nil)
        #expect(WebPushRequestSealer.subscriptionKeyBytes("A=Q=") == nil)
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AQ ==") == nil)
        #expect(WebPushRequestSealer.subscriptionKeyBytes("A") == nil)
        #expect(WebPushRequestSealer.subscriptionKeyBytes("AR") == nil, "non-zero unused bits")
    }

    @Test func wrongSizesAreStillRefused() throws {
        let vapid = VAPIDTokenManager(privateKey: try P256PrivateKey.generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let endpoint = try WebPushEndpoint(parsing: "https://push.example/x")
        let point = try P256PrivateKey.generate().publicKey.x963Representation
        func reason(_ p256dh: String, _ auth: String) -> String? {
            do {
                _ = try WebPushRequestSealer.seal(PushRequest(path: "/x", headers: [], body: [1]), endpoint: endpoint,
                                                  p256dh: p256dh, auth: auth, vapid: vapid)
                return nil
            } catch { return error.reason.rawValue }
        }
        let goodAuth = Data(SecureRandom.bytes(16)).base64EncodedString()
        #expect(reason(Data(point).base64EncodedString(), goodAuth) == nil)
        #expect(reason(Data(point.dropLast()).base64EncodedString(), goodAuth) == "invalid_subscription_keys", "64 bytes")
        #expect(reason(Data(point + [0]).base64EncodedString(), goodAuth) == "invalid_subscription_keys", "66 bytes")
        #expect(reason(Data(point).base64EncodedString(), Data(SecureRandom.bytes(15)).base64EncodedString()) == "invalid_subscription_keys")
        #expect(reason(Data(point).base64EncodedString(), Data(SecureRandom.bytes(17)).base64EncodedString()) == "invalid_subscription_keys")
    }

    // MARK: Topic, TTL, Urgency (RFC 8030 §5.2-§5.4)

    @Test func topicsThatDoNotDecodeAreDerived() throws {
        // "promo" is 5 characters (1 mod 4): valid alphabet, but Apple refuses it. Expected values from Python:
        // base64.urlsafe_b64encode(hashlib.sha256(b"promo").digest())[:32].
        let promo = try request(["contents": ["en": "x"], "collapse_id": "promo"], endpoint: "https://web.push.apple.com/QGu")
        #expect(promo.header("topic") == "vO8RtqPt7XudSoF_0G-I_DAotWDbWJPi")
        #expect(WebPushRequestFactory.topic(for: "order-1_A") == "3rJemdic_Yw713TS1SDEB-ItzvK6giTL")
        for valid in ["ab", "abc", "abcd", "promo-12", String(repeating: "Z", count: 32)] {
            #expect(WebPushRequestFactory.topic(for: valid) == valid)
        }
        for id in ["a", "promo", "order:1", "çok", String(repeating: "a", count: 33), "a b", "a=="] {
            let topic = try #require(WebPushRequestFactory.topic(for: id))
            #expect(WebPushRequestFactory.isValidTopic(topic), "\(id) -> \(topic)")
            #expect(topic.utf8.count == 32 && Base64URL.decode(topic)?.count == 24)
            #expect(WebPushRequestFactory.topic(for: id) == topic, "deterministic")
        }
    }

    @Test func ttlAndUrgencyFollowRFC8030() throws {
        let endpoint = "https://fcm.googleapis.com/fcm/send/abc"
        let high = try request(["contents": ["en": "x"], "priority": "high", "ttl": 0], endpoint: endpoint)
        #expect(high.header("ttl") == "0")
        #expect(high.header("urgency") == "high")
        let normal = try request(["contents": ["en": "x"], "priority": "normal"], endpoint: endpoint)
        #expect(normal.header("urgency") == "normal")
        #expect(normal.header("ttl") == "2419200")
        #expect(try request(["contents": ["en": "x"]], endpoint: endpoint).header("urgency") == "normal")
    }

    // MARK: Per-service quirks

    @Test func servicesAreRecognizedByHost() {
        #expect(WebPushService(host: "fcm.googleapis.com") == .fcm)
        #expect(WebPushService(host: "updates.push.services.mozilla.com") == .autopush)
        #expect(WebPushService(host: "web.push.apple.com") == .apple)
        #expect(WebPushService(host: "wns2-par02p.notify.windows.com") == .wns)
        #expect(WebPushService(host: "db5p.notify.windows.com") == .wns)
        #expect(WebPushService(host: "notify.windows.com.evil.example") == .other)
        #expect(WebPushService(host: "evilnotify.windows.com") == .other)
        #expect(WebPushService(host: "push.example.net") == .other)
    }

    @Test func wnsCachePolicyFollowsTheTTL() throws {
        let endpoint = "https://wns2-par02p.notify.windows.com/w/?token=BQYAAAB"
        let now = try request(["contents": ["en": "x"], "ttl": 0], endpoint: endpoint)
        #expect(now.header("x-wns-cache-policy") == "no-cache")
        let later = try request(["contents": ["en": "x"], "ttl": 600], endpoint: endpoint)
        #expect(later.header("x-wns-cache-policy") == "cache")
        #expect(later.headers.map(\.name) == ["ttl", "urgency", "x-wns-cache-policy", "content-type"])
        // No other service gets the header.
        for other in ["https://fcm.googleapis.com/fcm/send/a", "https://updates.push.services.mozilla.com/wpush/v2/a",
                      "https://web.push.apple.com/a", "https://push.example.net/a"]
        {
            #expect(try request(["contents": ["en": "x"], "ttl": 0], endpoint: other).header("x-wns-cache-policy") == nil)
        }
    }

    @Test func everyServiceGetsAtMost4096EncryptedBytes() throws {
        // Autopush's and FCM's limit is RFC 8030 §7.2's 4096 bytes of encrypted payload: the plaintext limit
        // leaves room for exactly the aes128gcm overhead of one record.
        #expect(WebPushRequestFactory.maximumPlaintextSize + WebPushRequestFactory.encryptionOverhead == 4096)
        let big = try request(["contents": ["en": .string(String(repeating: "x", count: 6000))]], endpoint: "https://updates.push.services.mozilla.com/wpush/v2/a")
        #expect(big.body.count <= WebPushRequestFactory.maximumPlaintextSize)
    }
}
