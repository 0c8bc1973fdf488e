import DeliveryCore

@testable import Worker

extension ClaimedDelivery {
    /// The `deliveries.id` of a delivery the test knows is leased through a row (``DeliverySource/row(_:)``);
    /// setting it makes the delivery a row's.
    var id: Int64 {
        get {
            guard case .row(let id) = source else { preconditionFailure("\(source) is not a deliveries row") }
            return id
        }
        set { source = .row(newValue) }
    }
}
