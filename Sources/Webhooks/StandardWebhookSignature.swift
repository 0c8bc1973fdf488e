import Foundation
import PushCrypto

/// The Standard Webhooks signature (Standard Webhooks specification, "Signature scheme", `v1`): HMAC-SHA256
/// under the endpoint's secret of `"<webhook-id>.<webhook-timestamp>.<body>"`, in base64, sent as
/// `webhook-signature: v1,<base64>` beside `webhook-id` and `webhook-timestamp` (seconds since the Unix epoch).
/// HMAC from OpenSSL (`PushCrypto.HMACSHA256`).
public enum StandardWebhookSignature {
    /// The three header field names, lower case as HTTP/2 sends them.
    public static let idField = "webhook-id"
    public static let timestampField = "webhook-timestamp"
    public static let signatureField = "webhook-signature"

    /// The `webhook-signature` value for one message: `v1,<base64 of the 32-byte tag>`.
    /// - Parameters:
    ///   - id: the message id, the same on every retry of the message (receivers deduplicate by it).
    ///   - timestamp: seconds since the Unix epoch when this attempt is sent (receivers refuse old ones).
    ///   - body: the exact bytes sent as the request's content.
    public static func sign(id: String, timestamp: Int64, body: some Collection<UInt8>, secret: WebhookSecret) -> String {
        "v1," + Data(tag(id: id, timestamp: timestamp, body: body, secret: secret)).base64EncodedString()
    }

    /// The three header fields of one attempt, in the order the specification lists them.
    public static func headerFields(id: String, timestamp: Int64, body: some Collection<UInt8>,
                                    secret: WebhookSecret) -> [(name: String, value: String)] {
        [(idField, id), (timestampField, String(timestamp)), (signatureField, sign(id: id, timestamp: timestamp, body: body, secret: secret))]
    }

    /// Whether `signatureField` (space-separated `version,base64` entries, as a receiver may get several during
    /// a key rotation) holds a `v1` signature of the message under `secret`, compared in constant time. Versions
    /// other than `v1` are skipped. The timestamp's tolerance is the receiver's business and not checked here.
    public static func verify(id: String, timestamp: Int64, body: some Collection<UInt8>, signatures: String,
                              secret: WebhookSecret) -> Bool {
        let expected = tag(id: id, timestamp: timestamp, body: body, secret: secret)
        for entry in signatures.split(separator: " ") {
            let parts = entry.split(separator: ",", maxSplits: 1)
            guard parts.count == 2, parts[0] == "v1", let given = Data(base64Encoded: String(parts[1])) else { continue }
            if HMACSHA256.isEqual(Array(given), expected) { return true }
        }
        return false
    }

    private static func tag(id: String, timestamp: Int64, body: some Collection<UInt8>, secret: WebhookSecret) -> [UInt8] {
        var message = Array("\(id).\(timestamp).".utf8)
        message.append(contentsOf: body)
        return secret.key.authenticationCode(message: message)
    }
}
