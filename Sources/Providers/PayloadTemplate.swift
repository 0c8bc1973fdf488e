import DeliveryCore

/// A rendered payload (an APNs body, a Web Push plaintext) whose one per-device part is the signed msgId,
/// so it can be rendered once per notification, language and provider and completed per device by writing
/// that device's msgId over a fixed window of bytes.
///
/// Exact by construction: every msgId is ``msgIDLength`` (64) characters of base64url (`MessageIDCodec`),
/// which JSON never escapes, so every byte count the renderer takes decisions on (the 4 KB limits, the
/// shortening of long texts) is the same whatever the msgId, and the output differs only in the msgId's own
/// bytes. ``make(render:)`` checks this on each template by rendering twice, with two different msgIds, and
/// gives up (`nil`: render per device) unless the two outputs differ in exactly one window of 64 bytes.
public struct PayloadTemplate: Sendable, Equatable {
    /// The length of every signed msgId, in bytes (base64url of 48 bytes, unpadded).
    public static let msgIDLength = 64

    /// The payload as rendered with a stand-in msgId.
    public let bytes: [UInt8]
    /// Where the msgId's 64 bytes start in ``bytes``.
    public let msgIDOffset: Int

    /// The payload for one device: ``bytes`` with `msgID` at ``msgIDOffset``; `nil` when `msgID` is not
    /// ``msgIDLength`` bytes of base64url (then the caller renders it in full).
    public func filled(msgID: String) -> [UInt8]? {
        var msgID = msgID
        // In place (one check and one copy of 64 bytes per device), on the string's contiguous UTF-8.
        return msgID.withUTF8 { id in
            guard id.count == Self.msgIDLength, id.allSatisfy(WebPushRequestFactory.isBase64URLByte) else { return nil }
            var out = bytes
            out.withUnsafeMutableBufferPointer { out in
                _ = UnsafeMutableBufferPointer(rebasing: out[msgIDOffset..<(msgIDOffset + Self.msgIDLength)]).initialize(from: id)
            }
            return out
        }
    }

    /// Renders with two stand-in msgIds (64 × `A`, 64 × `B`) and returns the template when the outputs have
    /// the same length and differ in exactly one 64-byte window holding the stand-in; otherwise `nil`.
    /// - Throws: whatever `render` throws (the error is the same for every msgId, as is everything else).
    public static func make<Failure: Error>(render: (String) throws(Failure) -> [UInt8]) throws(Failure) -> PayloadTemplate? {
        let first = String(repeating: "A", count: msgIDLength)
        let second = String(repeating: "B", count: msgIDLength)
        let a = try render(first)
        let b = try render(second)
        guard a.count == b.count, let start = a.indices.first(where: { a[$0] != b[$0] }) else { return nil }
        guard let end = a.indices.last(where: { a[$0] != b[$0] }), end - start + 1 == msgIDLength,
              a[start...end].elementsEqual(first.utf8), b[start...end].elementsEqual(second.utf8)
        else { return nil }
        return PayloadTemplate(bytes: a, msgIDOffset: start)
    }
}
