import DeliveryCore
import Foundation
import PushCrypto

/// Turns a plaintext Web Push request (``WebPushRequestFactory/makePlaintextRequest(_:)``) into the one
/// that goes on the wire: body encrypted for the subscription (RFC 8291, ``WebPushEncryption``),
/// `content-encoding: aes128gcm`, `content-type: application/octet-stream` (the body is now ciphertext),
/// and `authorization: vapid t=..., k=...` for the endpoint's origin (RFC 8292 §3). No I/O.
public enum WebPushRequestSealer {
    /// - Parameters:
    ///   - request: the plaintext request; its `ttl`, `urgency` and `topic` headers are kept in order.
    ///   - endpoint: the subscription's parsed endpoint (its `origin` is the VAPID audience).
    ///   - p256dh: the subscription's `web_p256dh`, base64 of a 65-byte P-256 point (``subscriptionKeyBytes(_:)``:
    ///     either alphabet, padded or not).
    ///   - auth: the subscription's `web_auth`, base64 of 16 bytes (the same rules).
    ///   - vapid: the app's token manager.
    /// - Throws: `WebPushRequestError` `invalid_subscription_keys` (keys that are not base64, of the wrong
    ///   size, or not a curve point: the subscription can never be reached), `payload_too_large` (over 3993
    ///   bytes of plaintext), `vapid_failed` (the token could not be made), `encryption_failed`.
    public static func seal(_ request: PushRequest, endpoint: WebPushEndpoint, p256dh: String, auth: String,
                            vapid: VAPIDTokenManager) throws(WebPushRequestError) -> PushRequest
    {
        guard p256dh.utf8.count <= 256, let publicKey = subscriptionKeyBytes(p256dh), publicKey.count == 65, publicKey[0] == 4 else {
            throw WebPushRequestError(reason: .invalidSubscriptionKeys, detail: "web_p256dh is not base64 of a 65-byte uncompressed P-256 point")
        }
        guard auth.utf8.count <= 64, let secret = subscriptionKeyBytes(auth), secret.count == 16 else {
            throw WebPushRequestError(reason: .invalidSubscriptionKeys, detail: "web_auth is not base64 of 16 bytes")
        }
        guard request.body.count <= WebPushEncryption.maximumPlaintextSize else {
            throw WebPushRequestError(reason: .payloadTooLarge,
                                      detail: "the plaintext is \(request.body.count) bytes; at most \(WebPushEncryption.maximumPlaintextSize) fit")
        }
        let body: [UInt8]
        do {
            body = try WebPushEncryption.encrypt(plaintext: request.body, userAgentPublicKey: publicKey, authSecret: secret)
        } catch let error as CryptoError where error.code == .invalidKey {
            throw WebPushRequestError(reason: .invalidSubscriptionKeys, detail: "web_p256dh is not a point on P-256")
        } catch {
            throw WebPushRequestError(reason: .encryptionFailed, detail: "\(error)")
        }
        let authorization: String
        do {
            authorization = try vapid.authorization(for: endpoint)
        } catch {
            throw WebPushRequestError(reason: .vapidFailed, detail: error.message)
        }
        var headers = request.headers.filter {
            let name = $0.name.lowercased()
            return name != "content-type" && name != "content-encoding" && name != "authorization"
        }
        headers.append(PushHeader("content-type", "application/octet-stream"))
        headers.append(PushHeader("content-encoding", "aes128gcm"))
        headers.append(PushHeader("authorization", authorization))
        return PushRequest(method: request.method, path: request.path, headers: headers, body: body)
    }

    /// Decodes a subscription key as the common Web Push libraries accept it: base64url (what
    /// `PushSubscription.toJSON()` gives, RFC 8291 §3.2) or standard base64 (RFC 4648 §4: `+`, `/`, what
    /// `btoa` and many backends store), with or without `=` padding. Padding, when present, must make the
    /// length a multiple of 4 (at most two `=`). `nil` for anything else: other characters, whitespace, a
    /// length of 1 mod 4, non-zero unused bits.
    public static func subscriptionKeyBytes(_ text: String) -> [UInt8]? {
        var characters = Array(text.utf8)
        var padding = 0
        while characters.last == UInt8(ascii: "=") {
            characters.removeLast()
            padding += 1
        }
        if padding > 0 && (padding > 2 || (characters.count + padding) % 4 != 0) { return nil }
        guard !characters.contains(UInt8(ascii: "=")) else { return nil }
        for index in characters.indices {
            if characters[index] == UInt8(ascii: "+") { characters[index] = UInt8(ascii: "-") }
            else if characters[index] == UInt8(ascii: "/") { characters[index] = UInt8(ascii: "_") }
        }
        return Base64URL.decode(String(decoding: characters, as: UTF8.self))
    }
}
