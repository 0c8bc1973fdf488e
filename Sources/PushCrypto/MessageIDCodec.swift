import Foundation
import Synchronization

/// The signed msgId carried in every push (`on.msgId` for APNs): the SDK reports `received` / `opened` /
/// `clicked` with it, and the API trusts the report because only the app's `signing_key` can make a valid
/// one. Format (see `docs/msgid.md`):
///
///     msgId = base64url_nopad( 0x01 || notification_id[16] || subscription_id[16] || tag[15] )
///     tag   = first 15 bytes of HMAC-SHA256(signing_key, "pushizo-msgid" || 0x01 || notification_id || subscription_id)
///
/// 48 bytes encode to exactly 64 URL-safe characters. The 120-bit tag is far beyond any online forgery
/// budget (NIST SP 800-107 §5.3.4 allows truncation to 64 bits and more).
public enum MessageIDCodec {
    /// The version byte of the current format.
    public static let version: UInt8 = 1
    /// The length of every msgId this version produces, in characters.
    public static let encodedLength = 64
    static let tagLength = 15
    static let domain = Array("pushizo-msgid".utf8)

    /// Signs the pair with `key` (the app's `signing_key`).
    /// - Returns: a 64-character base64url string (alphabet `A-Z a-z 0-9 - _`).
    public static func sign(notificationID: UUID, subscriptionID: UUID, key: [UInt8]) -> String {
        // domain || body in one buffer; then body || tag in the same one (one allocation, not five).
        var bytes = domain
        bytes.reserveCapacity(domain.count + 48)
        bytes.append(version)
        withUnsafeBytes(of: notificationID.uuid) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: subscriptionID.uuid) { bytes.append(contentsOf: $0) }
        let tag = keyed(key).authenticationCode(message: bytes)
        bytes.append(contentsOf: tag.prefix(tagLength))
        return Base64URL.encode(bytes[domain.count...])
    }

    /// Checks a msgId against `key` and returns the identities it carries, or `nil` when the text is not a
    /// msgId of this version or its tag is wrong. The tag comparison is constant-time (`CRYPTO_memcmp`).
    public static func verify(_ msgID: String, key: [UInt8]) -> (notificationID: UUID, subscriptionID: UUID)? {
        guard msgID.utf8.count == encodedLength, let decoded = Base64URL.decode(msgID), decoded.count == 48,
              decoded[0] == version
        else { return nil }
        let body = Array(decoded[0..<33])
        let expected = Array(keyed(key).authenticationCode(message: domain + body).prefix(tagLength))
        guard HMACSHA256.isEqual(expected, Array(decoded[33...])) else { return nil }
        return (uuid(from: body[1..<17]), uuid(from: body[17..<33]))
    }

    /// Keyed HMAC contexts of the signing keys seen lately: a worker signs every delivery with its app's key, and
    /// keying is most of an HMAC's cost. At most ``keyedLimit`` are kept (then the cache starts over), so a fleet of
    /// many apps cannot grow it.
    private static let keyedCache = Mutex(KeyedCache())
    static let keyedLimit = 256

    /// The keyed contexts by signing key, and the last one asked for: a batch's deliveries nearly all carry one
    /// app's key (the claim hands each row the same array), so comparing with the last key (the same buffer:
    /// `==` sees it at once) replaces hashing its 32 bytes for every delivery.
    private struct KeyedCache {
        var byKey: [[UInt8]: HMACSHA256.Key] = [:]
        var last: (key: [UInt8], keyed: HMACSHA256.Key)?
    }

    private static func keyed(_ key: [UInt8]) -> HMACSHA256.Key {
        keyedCache.withLock { cache in
            if let last = cache.last, last.key == key { return last.keyed }
            let keyed: HMACSHA256.Key
            if let known = cache.byKey[key] {
                keyed = known
            } else {
                if cache.byKey.count >= keyedLimit { cache.byKey.removeAll(keepingCapacity: true) }
                keyed = HMACSHA256.Key(key)
                cache.byKey[key] = keyed
            }
            cache.last = (key, keyed)
            return keyed
        }
    }

    static func uuid(from bytes: ArraySlice<UInt8>) -> UUID {
        let b = Array(bytes)
        return UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }
}
