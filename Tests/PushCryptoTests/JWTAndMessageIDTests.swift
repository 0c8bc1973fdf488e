import Foundation
import Testing
@testable import PushCrypto

@Suite struct JSONWebTokenTests {
    @Test func signAndDecode() throws {
        let key = try P256PrivateKey.generate()
        let token = try JSONWebToken.signES256(header: ["kid": "ABC123DEFG"], claims: ["iss": "DEF123GHIJ", "iat": 1_700_000_000], key: key)
        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        let decoded = try JSONWebToken.decode(token)
        #expect(String(decoding: decoded.header, as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: decoded.claims, as: UTF8.self) == #"{"iat":1700000000,"iss":"DEF123GHIJ"}"#)
        #expect(decoded.signature.count == 64)
        #expect(decoded.signingInput == Array("\(parts[0]).\(parts[1])".utf8))
        #expect(key.publicKey.verifyES256(signature: decoded.signature, for: decoded.signingInput))
    }

    @Test func decodeRejectsMalformedTokens() {
        for bad in ["", "a.b", "a.b.c.d", "!!.e30.AA", "e30.e30.*"] {
            #expect(throws: CryptoError.self) { try JSONWebToken.decode(bad) }
        }
    }
}

@Suite struct MessageIDCodecTests {
    let key = Array("app-signing-key-0123456789abcdef".utf8)

    @Test func signVerifyRoundTrip() throws {
        let notification = UUID()
        let subscription = UUID()
        let msgID = MessageIDCodec.sign(notificationID: notification, subscriptionID: subscription, key: key)
        #expect(msgID.count == 64)
        #expect(msgID.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        let decoded = try #require(MessageIDCodec.verify(msgID, key: key))
        #expect(decoded.notificationID == notification)
        #expect(decoded.subscriptionID == subscription)
        // Deterministic: the same pair and key always give the same msgId (retries carry one id).
        #expect(MessageIDCodec.sign(notificationID: notification, subscriptionID: subscription, key: key) == msgID)
    }

    @Test func knownAnswer() {
        // Pins the documented format (docs/msgid.md): version 1, ids in RFC 4122 byte order, 15-byte tag.
        let n = UUID(uuidString: "00000000-0000-0000-0000-000000000001")!
        let s = UUID(uuidString: "00000000-0000-0000-0000-000000000002")!
        let msgID = MessageIDCodec.sign(notificationID: n, subscriptionID: s, key: key)
        let body: [UInt8] = [1] + [UInt8](repeating: 0, count: 15) + [1] + [UInt8](repeating: 0, count: 15) + [2]
        let tag = HMACSHA256.authenticationCode(key: key, message: Array("pushizo-msgid".utf8) + body).prefix(15)
        #expect(msgID == Base64URL.encode(body + tag))
        #expect(msgID.hasPrefix("AQAAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAC"))
    }

    /// Keys taking turns, including one equal in bytes to another but in a buffer of its own: each msgId is
    /// signed with its own key's context, never the one asked for last.
    @Test func keysTakingTurnsEachSignWithTheirOwn() {
        let other = Array("another-app-key".utf8)
        let copy = Array(key.map { $0 })
        let n = UUID(), s = UUID()
        for signingKey in [key, other, key, copy, other, other, copy] {
            let msgID = MessageIDCodec.sign(notificationID: n, subscriptionID: s, key: signingKey)
            let body: [UInt8] = [1] + withUnsafeBytes(of: n.uuid, Array.init) + withUnsafeBytes(of: s.uuid, Array.init)
            let tag = HMACSHA256.authenticationCode(key: signingKey, message: Array("pushizo-msgid".utf8) + body).prefix(15)
            #expect(msgID == Base64URL.encode(body + tag))
            #expect(MessageIDCodec.verify(msgID, key: signingKey) != nil)
        }
    }

    @Test func tamperingIsDetected() {
        let msgID = MessageIDCodec.sign(notificationID: UUID(), subscriptionID: UUID(), key: key)
        #expect(MessageIDCodec.verify(msgID, key: Array("another-key".utf8)) == nil)
        var characters = Array(msgID)
        for position in [0, 5, 30, 50, 63] {
            var changed = characters
            changed[position] = changed[position] == "A" ? "B" : "A"
            #expect(MessageIDCodec.verify(String(changed), key: key) == nil, "position \(position)")
        }
        characters.removeLast()
        #expect(MessageIDCodec.verify(String(characters), key: key) == nil)
        #expect(MessageIDCodec.verify(msgID + "A", key: key) == nil)
        #expect(MessageIDCodec.verify(String(repeating: "*", count: 64), key: key) == nil)
    }
}
