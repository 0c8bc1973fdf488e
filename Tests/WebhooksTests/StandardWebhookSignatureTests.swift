import Foundation
import Testing
@testable import Webhooks

/// The Standard Webhooks specification's test vector, as its reference libraries' tests use it (the Python
/// library's `test_sign_function`, `test_invalid_signature_raises_error`, `test_multi_sig_payload_is_valid`).
@Suite("Standard Webhooks signatures")
struct StandardWebhookSignatureTests {
    static let secretText = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let timestamp: Int64 = 1_614_265_330
    static let body = Array(#"{"test": 2432232314}"#.utf8)
    static let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

    @Test func theSpecificationsVectorSignsToItsSignature() throws {
        let secret = try WebhookSecret(parsing: Self.secretText)
        #expect(StandardWebhookSignature.sign(id: Self.id, timestamp: Self.timestamp, body: Self.body, secret: secret) == Self.signature)
        let fields = StandardWebhookSignature.headerFields(id: Self.id, timestamp: Self.timestamp, body: Self.body, secret: secret)
        #expect(fields.map(\.name) == ["webhook-id", "webhook-timestamp", "webhook-signature"])
        #expect(fields.map(\.value) == [Self.id, "1614265330", Self.signature])
    }

    @Test func verificationAcceptsTheVectorAndRefusesAChangedSignatureBodyIdOrTime() throws {
        let secret = try WebhookSecret(parsing: Self.secretText)
        func verify(id: String = Self.id, timestamp: Int64 = Self.timestamp, body: [UInt8] = Self.body, _ signatures: String) -> Bool {
            StandardWebhookSignature.verify(id: id, timestamp: timestamp, body: body, signatures: signatures, secret: secret)
        }
        #expect(verify(Self.signature))
        // The reference tests' invalid signature: the last base64 digit changed.
        #expect(!verify("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="))
        #expect(!verify(id: "msg_p5jXN8AQM9LWM0D4loKWxJeK", Self.signature))
        #expect(!verify(timestamp: Self.timestamp + 1, Self.signature))
        #expect(!verify(body: Array(#"{"test": 2432232315}"#.utf8), Self.signature))
        // Signed under another key.
        let other = WebhookSecret.generate().secret
        #expect(!StandardWebhookSignature.verify(id: Self.id, timestamp: Self.timestamp, body: Self.body, signatures: Self.signature, secret: other))
    }

    @Test func aValidV1SignatureAmongOthersVerifies() throws {
        let secret = try WebhookSecret(parsing: Self.secretText)
        let signatures = ["v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
                          Self.signature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="].joined(separator: " ")
        #expect(StandardWebhookSignature.verify(id: Self.id, timestamp: Self.timestamp, body: Self.body, signatures: signatures, secret: secret))
        // The right tag under another version name is not a v1 signature.
        let renamed = "v2," + Self.signature.dropFirst(3)
        #expect(!StandardWebhookSignature.verify(id: Self.id, timestamp: Self.timestamp, body: Self.body, signatures: renamed, secret: secret))
    }
}

@Suite("Webhook secrets")
struct WebhookSecretTests {
    @Test func unpaddedAndPaddedBase64ParseToTheSameKey() throws {
        // 24 bytes need no padding; 25 bytes end in "==" when padded.
        let key = (0..<25).map { UInt8($0 * 7 % 256) }
        let padded = "whsec_" + Data(key).base64EncodedString()
        #expect(padded.hasSuffix("=="))
        let unpadded = String(padded.dropLast(2))
        let a = try WebhookSecret(parsing: padded)
        let b = try WebhookSecret(parsing: unpadded)
        let body = Array("{}".utf8)
        #expect(StandardWebhookSignature.sign(id: "msg_1", timestamp: 1, body: body, secret: a)
                == StandardWebhookSignature.sign(id: "msg_1", timestamp: 1, body: body, secret: b))
    }

    @Test(arguments: [
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  // no prefix
        "whsec_MfKQ9r8G!YqrTwjUPD8ILPZIo2LaLaSw",  // not base64
        "whsec_" + Data(repeating: 1, count: 23).base64EncodedString(),  // a key too short
        "whsec_" + Data(repeating: 1, count: 65).base64EncodedString(),  // a key too long
        "whsec_",
    ])
    func malformedSecretsAreRefusedWithoutRepeatingThem(text: String) {
        #expect {
            _ = try WebhookSecret(parsing: text)
        } throws: { error in
            guard let error = error as? WebhookSecret.ParseError else { return false }
            let key = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
            return key.isEmpty || !error.message.contains(key)
        }
    }

    @Test func noRenderingOfASecretShowsItsKey() throws {
        let (secret, text) = WebhookSecret.generate(length: 32)
        let key = String(text.dropFirst("whsec_".count))
        var dumped = ""
        dump(secret, to: &dumped)
        for rendering in ["\(secret)", String(describing: secret), String(reflecting: secret), dumped, "\([secret])"] {
            #expect(!rendering.contains(key))
            #expect(!rendering.contains(String(key.prefix(8))))
        }
        #expect("\(secret)" == "whsec_<redacted>")
    }
}
