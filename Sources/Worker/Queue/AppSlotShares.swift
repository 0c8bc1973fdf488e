import Foundation

/// How one worker's delivery slots (`PUSHIZO_CONCURRENCY`) are shared between apps, as a value without I/O: what
/// each app holds (from its claim until its send ends), and the room each may take in the next claim
/// (``ClaimRoom``).
///
/// A slot is held for as long as its push takes: a push service answering in 25 s holds its deliveries' slots
/// 25 s. Without a share, one app whose pushes are slow (its own subscribers' push services, or a burst against a
/// slow provider) could take every slot, and every other app's pushes would wait for its answers. So:
/// - an app holding fewer than ``small`` slots (a few one-device notifications; at least the fewest free slots the
///   worker claims for) may hold up to that many, from a **reserve** of an eighth of the slots: an app with little
///   or nothing in flight finds room at the next claim, whatever the others hold;
/// - the rest (`concurrency - reserve`) is shared equally between the apps holding at least ``small``: each may
///   hold at most `(concurrency - reserve) / such apps`, so a slow app holds its share and no more, and a lone
///   broadcast may use all of it whatever one-device pushes go beside it.
/// An app above its share (another became large) takes nothing until it is back under it.
public struct AppSlotShares: Sendable, Equatable {
    /// The worker's slots (`PUSHIZO_CONCURRENCY`).
    public let concurrency: Int
    /// Slots held per app (apps holding none are not kept).
    public private(set) var held: [UUID: Int] = [:]

    /// Slots kept for apps holding fewer than ``small``.
    public let reserve: Int
    /// The most an app may hold within the reserve; from this many on it shares the rest with the other large apps.
    public let small: Int
    /// Apps holding at least ``small``.
    public private(set) var largeApps = 0

    /// - Parameter minimumClaim: the fewest free slots the worker claims for: the reserve and ``small`` are at least
    ///   that, so that an app holding little or nothing is claimed for at once.
    public init(concurrency: Int, minimumClaim: Int = 1) {
        self.concurrency = max(1, concurrency)
        reserve = min(self.concurrency, max(1, self.concurrency / 8, minimumClaim))
        small = max(1, min(reserve, minimumClaim))
    }

    /// What each app holding at least ``small`` slots may hold at most now.
    public var share: Int { max(small, (concurrency - reserve) / max(1, largeApps)) }

    /// `count` deliveries of `app` were claimed.
    public mutating func claimed(_ app: UUID, count: Int = 1) {
        guard count > 0 else { return }
        let before = held[app, default: 0]
        held[app] = before + count
        if before < small && before + count >= small { largeApps += 1 }
    }

    /// One delivery of `app` ended its send (its slot is released).
    /// - Returns: whether this release gave room worth a claim to an app that had too little for one: `app`'s
    ///   room reached `worthAClaim` (or its share, when that is smaller), or `app` fell below ``small`` while other
    ///   apps are large (their shares grew). A worker whose last claim came back short claims again at once then,
    ///   rather than a poll interval later.
    @discardableResult
    public mutating func released(_ app: UUID, worthAClaim: Int = 1) -> Bool {
        guard let count = held[app] else { return false }
        held[app] = count > 1 ? count - 1 : nil
        if count == small {
            largeApps -= 1
            return largeApps > 0
        }
        guard count > small else { return false }
        return share - (count - 1) == max(1, min(worthAClaim, share))
    }

    /// How many more slots `app` may hold at most, as successive claims would let it take: up to ``small`` within
    /// the reserve, or its share as a large app (counting it among the large apps if it is not one yet), less what
    /// it holds. What rows leased at insert may take (``Admission/reserve(app:upTo:pendingCompletions:)``), where
    /// a claim, bounded by its batch, takes its share over several claims.
    public func roomToHold(_ app: UUID) -> Int {
        let holds = held[app, default: 0]
        let large = holds >= small ? largeApps : largeApps + 1
        return max(0, small - holds, max(small, (concurrency - reserve) / max(1, large)) - holds)
    }

    /// The room of each app holding slots for the next claim: up to ``small`` for an app below it, its share less
    /// what it holds for a large one (full at or above it); apps holding none are bounded by the claim's limit
    /// alone.
    public var room: ClaimRoom {
        guard !held.isEmpty else { return .unbounded }
        let share = self.share
        return ClaimRoom(limited: held.mapValues { $0 < small ? max(small - $0, share - $0) : share - $0 })
    }
}
