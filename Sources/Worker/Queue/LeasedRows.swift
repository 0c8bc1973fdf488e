import Foundation
import Postgres

/// Deliveries an expansion chunk inserted leased to its own worker (``ExpansionStore/InsertLease``), as the insert
/// itself returned them in the claim's row shape (``ClaimStore/claimedRowsSelect``): no statement reads them back.
/// They are read into ``ClaimedDelivery`` values only once the chunk's transaction has committed
/// (``ClaimStore/leasedRows(_:on:)``), so that a row that cannot be read is set aside in a statement of its own and
/// rows of a chunk rolled back are never sent.
public struct LeasedRows: Sendable {
    /// The insert's rows, one per leased delivery (nil: none).
    let rows: PostgresQueryResult?
    /// When the insert was sent: with its `now()` (`claimed_at`), the rows' reading of PostgreSQL's clock.
    let sent: DatabaseClockReading.StatementTiming
    /// The notification's row version (`xmin`) as the chunk's transaction leaves it. The insert read the version
    /// before the chunk's own update of the notification (its cursor, its count), which gives the row a new one:
    /// a claim of these rows would read the new one, and so does the message cache (``MessageCache``), which
    /// would otherwise read the message again for every delivery.
    let messageVersion: String

    /// None leased.
    public static let none = LeasedRows(rows: nil, sent: .init(), messageVersion: "")

    init(rows: PostgresQueryResult?, sent: DatabaseClockReading.StatementTiming, messageVersion: String) {
        self.rows = rows.flatMap { $0.isEmpty ? nil : $0 }
        self.sent = sent
        self.messageVersion = messageVersion
    }

    /// How many deliveries were leased.
    public var count: Int { rows?.count ?? 0 }

    /// The leased deliveries' ids (`deliveries.id`), in the insert's order.
    public var ids: [Int64] { (try? rows?.map { try $0.decode(Int64.self, "id") }) ?? [] }
}
