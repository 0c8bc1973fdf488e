import Foundation
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

@Suite struct WebPushRequestSealerTests {
    @Test func sealedRequestDecryptsAndCarriesVAPID() throws {
        let subscriber = try P256PrivateKey.generate()
        let auth = SecureRandom.bytes(16)
        let vapidKey = try P256PrivateKey.generate()
        let vapid = VAPIDTokenManager(privateKey: vapidKey, subject: try VAPIDSubject("mailto:ops@example.com"))
        let endpoint = try WebPushEndpoint(parsing: "https://updates.push.example.net/wpush/v2/abc")
        let plaintext = PushRequest(path: endpoint.path, headers: [
            PushHeader("ttl", "60"), PushHeader("urgency", "high"), PushHeader("topic", "t1"), PushHeader("content-type", "application/json"),
        ], body: Array(#"{"msgId":"M","title":"Hi"}"#.utf8))
        let sealed = try WebPushRequestSealer.seal(plaintext, endpoint: endpoint,
                                                   p256dh: Base64URL.encode(subscriber.publicKey.x963Representation),
                                                   auth: Base64URL.encode(auth), vapid: vapid)
        #expect(sealed.path == "/wpush/v2/abc")
        #expect(sealed.headers.map(\.name) == ["ttl", "urgency", "topic", "content-type", "content-encoding", "authorization"])
        #expect(sealed.header("content-type") == "application/octet-stream")
        #expect(sealed.header("content-encoding") == "aes128gcm")
        #expect(try WebPushEncryption.decrypt(body: sealed.body, userAgentPrivateKey: subscriber, authSecret: auth) == plaintext.body)
        let (token, key) = try VAPIDTokenManager.parseAuthorization(try #require(sealed.header("authorization")))
        let decoded = try JSONWebToken.decode(token)
        #expect(try P256PublicKey(x963: key).verifyES256(signature: decoded.signature, for: decoded.signingInput))
        #expect(String(decoding: decoded.claims, as: UTF8.self).contains(#""aud":"https://updates.push.example.net""#))
    }

    @Test func badKeysAndOversizeAreRequestErrors() throws {
        let vapid = VAPIDTokenManager(privateKey: try P256PrivateKey.generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let endpoint = try WebPushEndpoint(parsing: "https://push.example/x")
        let goodKey = Base64URL.encode(try P256PrivateKey.generate().publicKey.x963Representation)
        let goodAuth = Base64URL.encode(SecureRandom.bytes(16))
        let request = PushRequest(path: "/x", headers: [], body: [1])
        func reason(_ p256dh: String, _ auth: String, body: [UInt8] = [1]) -> String? {
            do {
                _ = try WebPushRequestSealer.seal(PushRequest(path: "/x", headers: [], body: body), endpoint: endpoint,
                                                  p256dh: p256dh, auth: auth, vapid: vapid)
                return nil
            } catch { return error.reason.rawValue }
        }
        #expect(reason("not base64!", goodAuth) == "invalid_subscription_keys")
        #expect(reason(Base64URL.encode([4] + [UInt8](repeating: 7, count: 64)), goodAuth) == "invalid_subscription_keys")
        #expect(reason(goodKey, "AAAA") == "invalid_subscription_keys")
        #expect(reason(goodKey, goodAuth, body: [UInt8](repeating: 0x41, count: 3994)) == "payload_too_large")
        #expect(reason(goodKey, goodAuth, body: [UInt8](repeating: 0x41, count: 3993)) == nil)
        #expect(request.body == [1])
    }
}
