import Foundation

/// One expand worker's memory of notifications whose chunk failed on data (SQLSTATE class 22 or 23), and the
/// rule that decides whose fault it is: the notification's own, or the database's (docs/targets.md, "Poison
/// rows"). A value without I/O; ``ExpansionStore/expandNext(on:chunkSize:suspects:pick:)`` carries out its verdicts.
///
/// The rule, the same evidence rule claims use: a failing notification is failed only on evidence that the
/// fault is its own, namely it failed before, another notification's chunk then committed with deliveries,
/// and it fails again. Until then it is a suspect, pushed behind the other due notifications. When the
/// notification picked next was already touched since this worker's first failure after its last success
/// (picks take the least recently touched, so every due notification has been tried since) and it fails too,
/// the fault is every chunk's (a broken trigger or constraint on `deliveries`): nothing is failed and the
/// caller backs off.
///
/// Times are the database's (`now()` of the statement that picked the notification, and its
/// `expansion_touched_at`), so they compare with each other and across restarts of this process.
public struct ExpansionSuspects: Sendable, Equatable {
    /// A notification whose chunk failed on data, not (yet) failed.
    public struct Suspect: Sendable, Equatable {
        /// When its first recorded failure was picked.
        public var firstFailure: Date
        /// When its latest failure was picked.
        public var lastFailure: Date
        /// Failures recorded since it became a suspect.
        public var failures: Int
    }

    /// What to do with a notification whose chunk just failed on data (and was rolled back).
    public enum Verdict: Sendable, Equatable {
        /// Evidence that the fault is its own: mark it `failed`.
        case fail
        /// No evidence yet: push it behind the other due notifications and try the next one.
        case setAside
        /// Every due notification failed since this worker's last successful chunk: a fault every chunk meets.
        /// Push it behind the others, fail nothing, back off.
        case stalled
    }

    /// Most suspects remembered (about 64 bytes each). Past it, stale ones (last failure more than
    /// ``forgetAfter`` seconds ago) are dropped, and while it stays full new suspects are not remembered: they
    /// are still set aside, and a later pass remembers them once convictions have made room.
    public let capacity: Int
    /// Seconds after its last failure a suspect may be forgotten to make room (say it was canceled meanwhile).
    public let forgetAfter: TimeInterval
    /// The suspects by notification id.
    public private(set) var suspects: [UUID: Suspect] = [:]
    /// When the last chunk that created at least one delivery was picked.
    public private(set) var lastSuccess: Date?
    /// When the first failure after ``lastSuccess`` was picked (`nil` while no chunk failed since).
    public private(set) var roundStart: Date?

    /// ``capacity`` unless told otherwise: about 256 KiB at most.
    public static let defaultCapacity = 4_096

    /// - Parameters:
    ///   - capacity: most suspects remembered (at least 1).
    ///   - forgetAfter: seconds after its last failure a suspect may be dropped to make room.
    public init(capacity: Int = defaultCapacity, forgetAfter: TimeInterval = 3_600) {
        self.capacity = max(1, capacity)
        self.forgetAfter = forgetAfter
    }

    /// A chunk of `notificationID`, picked at `time`, committed and created `created` deliveries. It is no
    /// longer a suspect. Only a chunk that created deliveries counts as a success: one that inserted nothing
    /// proves nothing about an insert into `deliveries` (and a producer could make such chunks at will).
    public mutating func chunkCommitted(_ notificationID: UUID, created: Int, at time: Date) {
        suspects[notificationID] = nil
        guard created > 0 else { return }
        lastSuccess = max(lastSuccess ?? time, time)
        roundStart = nil
    }

    /// `notificationID` ended otherwise (failed on validation, expired): forget it.
    public mutating func forget(_ notificationID: UUID) {
        suspects[notificationID] = nil
    }

    /// A chunk of `notificationID`, picked at `time` with `expansion_touched_at` `lastTouched`, failed on data.
    /// Records the failure and returns what to do.
    public mutating func chunkFailed(_ notificationID: UUID, lastTouched: Date?, at time: Date) -> Verdict {
        let known = suspects[notificationID]
        if let known, let lastSuccess, known.firstFailure < lastSuccess {
            suspects[notificationID] = nil
            return .fail
        }
        // Picks take the least recently touched due notification; one touched since the round began (or that
        // failed since, in case its bump did not land) means every due notification has been tried since.
        let cameAround = roundStart.map { round in
            (lastTouched.map { $0 >= round } ?? false) || (known.map { $0.lastFailure >= round } ?? false)
        } ?? false
        record(notificationID, known, at: time)
        if roundStart == nil { roundStart = time }
        return cameAround ? .stalled : .setAside
    }

    private mutating func record(_ notificationID: UUID, _ known: Suspect?, at time: Date) {
        if var known {
            known.lastFailure = max(known.lastFailure, time)
            known.failures += 1
            suspects[notificationID] = known
            return
        }
        if suspects.count >= capacity {
            let forgetAfter = self.forgetAfter
            suspects = suspects.filter { time.timeIntervalSince($0.value.lastFailure) < forgetAfter }
        }
        guard suspects.count < capacity else { return }
        suspects[notificationID] = Suspect(firstFailure: time, lastFailure: time, failures: 1)
    }
}
