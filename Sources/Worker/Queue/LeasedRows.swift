import DeliveryCore
import Foundation
import Postgres

/// Deliveries an expansion chunk or a small notifications' pass inserted leased to its own worker
/// (``ExpansionStore/InsertLease``), as the insert itself returned them in the claim's row shape
/// (``ClaimStore/claimedRowsSelect``; rows of the statement whose `id` is NULL carry only its own figures): no
/// statement reads or claims them. They are read into ``ClaimedDelivery`` values only once the transaction has
/// committed (``ClaimStore/leasedRows(_:on:)``), so that a row that cannot be read is set aside in a statement of
/// its own and rows of a transaction rolled back are never sent.
public struct LeasedRows: Sendable {
    /// The insert's rows, one per leased delivery (nil: none).
    let rows: PostgresQueryResult?
    /// When the insert was sent: with its `now()` (`claimed_at`), the rows' reading of PostgreSQL's clock.
    let sent: DatabaseClockReading.StatementTiming
    /// Each notification's row version (`xmin`) as the transaction leaves it. The insert read the version before
    /// the transaction's own update of the notification (its cursor, its count, its status), which gives the row
    /// a new one: a claim of these rows would read the new one, and so does the message cache (``MessageCache``),
    /// which would otherwise read the message again for every delivery.
    let messageVersions: [UUID: String]
    /// The rows are a leased page's (``DeliverySource/page(_:)``: each row's `id` is the page's), not
    /// `deliveries` rows.
    let pages: Bool

    /// None leased.
    public static let none = LeasedRows(rows: nil, sent: .init(), messageVersions: [:])

    init(
        rows: PostgresQueryResult?, sent: DatabaseClockReading.StatementTiming, messageVersions: [UUID: String],
        pages: Bool = false
    ) {
        self.rows = rows.flatMap { $0.isEmpty ? nil : $0 }
        self.sent = sent
        self.messageVersions = messageVersions
        self.pages = pages
    }

    /// The leased deliveries' sources, in the statement's order.
    public var sources: [DeliverySource] {
        let ids = (try? rows?.compactMap { try $0.decodeIfPresent(Int64.self, "id") }) ?? []
        return ids.map { pages ? .page($0) : .row($0) }
    }

    /// The leased deliveries' ids (`deliveries.id`; none for a page's deliveries), in the insert's order.
    public var ids: [Int64] { sources.compactMap(\.rowID) }

    /// How many deliveries were leased.
    public var count: Int { sources.count }
}
