import Foundation

/// How many deliveries of each app one claim may take in this worker, beyond the claim's limit: apps holding
/// their share of the worker's delivery slots take none (``full``), apps close to it no more than what is left
/// of it (``limited``). Every other app is bounded by the limit alone. The claim statement receives it as two
/// arrays and a pair of arrays (``ClaimStore/claimSQL(picking:limit:lane:)``). See ``AppSlotShares``.
public struct ClaimRoom: Sendable, Equatable {
    /// Apps the claim does not visit.
    public var full: [UUID]
    /// Apps the claim gives at most this many deliveries (each at least 1).
    public var limited: [UUID: Int]

    /// - Parameter limited: an app with a room of 0 or less counts as full.
    public init(full: [UUID] = [], limited: [UUID: Int] = [:]) {
        self.full = full + limited.filter { $0.value <= 0 }.keys.sorted { $0.uuidString < $1.uuidString }
        self.limited = limited.filter { $0.value > 0 }
    }

    /// No app is bounded beyond the claim's limit.
    public static let unbounded = ClaimRoom()

    /// The limited apps and their room, as the statement's two parallel arrays (`uuid[]`, `integer[]`).
    var limitedApps: [UUID] { limited.keys.sorted { $0.uuidString < $1.uuidString } }
    var limitedRooms: [Int] { limitedApps.map { limited[$0] ?? 0 } }
}
