import Foundation

/// How one worker's delivery slots (`PUSHIZO_CONCURRENCY`) are shared between apps, as a value without I/O: what
/// each app holds (from its claim until its send ends), and the room each may take in the next claim
/// (``ClaimRoom``).
///
/// A slot is held for as long as its push takes: a push service answering in 25 s holds its deliveries' slots
/// 25 s. Without a share, one app whose pushes are slow (its own subscribers' push services, or a burst against a
/// slow provider) could take every slot, and every other app's pushes would wait for its answers. So:
/// - an eighth of the slots (``reserve``; at least one, and at least the fewest free slots the worker claims for) is
///   kept for apps that hold none: an app with nothing in flight always finds room at the next claim, whatever
///   the others hold;
/// - the rest is shared equally between the apps that hold slots: each may hold at most `(concurrency -
///   reserve) / busy apps` (at least one), so a slow app holds its share and no more, and a lone broadcast may use
///   all but the reserve.
/// An app above its share (another app became busy) takes nothing until it is back under it.
public struct AppSlotShares: Sendable, Equatable {
    /// The worker's slots (`PUSHIZO_CONCURRENCY`).
    public let concurrency: Int
    /// Slots held per app (apps holding none are not kept).
    public private(set) var held: [UUID: Int] = [:]

    /// Slots kept for apps holding none (``reserve``).
    public let reserve: Int

    /// - Parameter minimumClaim: the fewest free slots the worker claims for: the reserve is at least that, so
    ///   that an app holding nothing is claimed for at once.
    public init(concurrency: Int, minimumClaim: Int = 1) {
        self.concurrency = max(1, concurrency)
        reserve = min(self.concurrency, max(1, self.concurrency / 8, minimumClaim))
    }

    /// What each app holding slots may hold at most now.
    public var share: Int { max(1, (concurrency - reserve) / max(1, held.count)) }

    /// `count` deliveries of `app` were claimed.
    public mutating func claimed(_ app: UUID, count: Int = 1) {
        guard count > 0 else { return }
        held[app, default: 0] += count
    }

    /// One delivery of `app` ended its send (its slot is released).
    /// - Returns: whether this release gave room worth a claim to an app that had too little for one: `app`'s
    ///   room reached `worthAClaim` (or its share, when that is smaller), or `app` left while others hold slots
    ///   (their shares grew). A worker whose last claim came back short claims again at once then, rather than
    ///   a poll interval later.
    @discardableResult
    public mutating func released(_ app: UUID, worthAClaim: Int = 1) -> Bool {
        guard let count = held[app] else { return false }
        if count > 1 {
            held[app] = count - 1
            return share - (count - 1) == max(1, min(worthAClaim, share))
        }
        held[app] = nil
        return !held.isEmpty
    }

    /// The room of each app holding slots for the next claim: its share less what it holds (full at or above
    /// it); apps holding none are bounded by the claim's limit alone.
    public var room: ClaimRoom {
        guard !held.isEmpty else { return .unbounded }
        let share = self.share
        return ClaimRoom(limited: held.mapValues { share - $0 })
    }
}
