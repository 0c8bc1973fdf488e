/// What a claimed delivery is leased through, and so what its completion is fenced on and writes back
/// (docs/performance.md, "Pages leased at expansion").
public enum DeliverySource: Sendable, Hashable, CustomStringConvertible {
    /// A `deliveries` row (`deliveries.id`): claimed, or inserted leased by an expansion. Its completion deletes
    /// or reschedules the row under the row's fence.
    case row(Int64)
    /// A page of a broadcast leased at expansion (`delivery_pages.id`), one subscription of which the delivery
    /// is: no queue row exists for it. Its completion writes its event under the page's fence; one that must
    /// wait becomes a `deliveries` row.
    case page(Int64)

    /// `row 12` / `page 3`, for logs.
    public var description: String {
        switch self {
        case .row(let id): "row \(id)"
        case .page(let id): "page \(id)"
        }
    }

    /// The `deliveries.id` of a row source (nil for a page).
    public var rowID: Int64? {
        if case .row(let id) = self { id } else { nil }
    }

    /// The `delivery_pages.id` of a page source (nil for a row).
    public var pageID: Int64? {
        if case .page(let id) = self { id } else { nil }
    }
}
