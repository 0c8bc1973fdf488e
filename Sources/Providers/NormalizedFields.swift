import DeliveryCore
import Foundation

/// Pieces of the normalized message (docs/wire-formats.md) that every wire format writes the same way.
enum NormalizedFields {
    /// `buttons` as the normalized `actions`: `[{"id", "title", "url"?}]`, in the message's order.
    static func actions(_ buttons: [NotificationMessage.Button]) -> JSONValue {
        .array(buttons.map { button in
            var action: [String: JSONValue] = ["id": .string(button.id), "title": .string(button.text)]
            if let url = button.url { action["url"] = .string(url) }
            return .object(action)
        })
    }

    /// Seconds a provider may hold the push: the earlier of `ttl` and `expiration - now`, clamped to
    /// 0...``NotificationMessage/maximumTTL`` and rounded down to whole seconds; `nil` when neither is set.
    /// Works in `Double` and clamps before converting, so no huge, negative, infinite or NaN input traps
    /// (a NaN expiration or clock counts as already passed: 0, "now or never").
    static func timeToLive(ttl: Int?, expiration: Date?, now: Date) -> Int? {
        guard ttl != nil || expiration != nil else { return nil }
        var remaining = Double(NotificationMessage.maximumTTL)
        if let ttl { remaining = min(remaining, Double(ttl)) }
        if let expiration {
            let untilExpiration = expiration.timeIntervalSince1970 - now.timeIntervalSince1970
            remaining = untilExpiration.isNaN ? 0 : min(remaining, untilExpiration)
        }
        guard remaining > 0 else { return 0 }
        return Int(remaining.rounded(.down))
    }
}
