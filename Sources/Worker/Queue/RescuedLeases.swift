import DeliveryCore

/// The deliveries of one claimed batch that were rescued from an expired lease (``ClaimedDelivery/rescuedFrom``
/// set): how many per provider, and from which workers. No I/O; the claim loop counts them
/// (`pushizo_deliveries_rescued_total`) and logs one line per batch that has any (docs/metrics.md).
public struct RescuedLeases: Sendable, Equatable {
    /// Rescued deliveries per provider of their subscription's platform (`nil`: a platform no provider serves).
    public var byProvider: [Provider?: Int]
    /// The distinct `leased_by` names the leases were taken from, sorted, at most ``listedWorkers`` of them (a
    /// log line stays short however many workers died).
    public var workers: [String]
    /// Distinct names beyond ``workers``.
    public var unlistedWorkers: Int

    /// Names listed in ``workers`` at most.
    public static let listedWorkers = 10

    /// The rescued deliveries among `claimed`; `nil` when there are none.
    public init?(_ claimed: [ClaimedDelivery]) {
        var byProvider: [Provider?: Int] = [:]
        var names = Set<String>()
        for delivery in claimed {
            guard let from = delivery.rescuedFrom else { continue }
            byProvider[Platform(delivery.platform).provider, default: 0] += 1
            names.insert(from)
        }
        guard !byProvider.isEmpty else { return nil }
        self.byProvider = byProvider
        let sorted = names.sorted()
        workers = Array(sorted.prefix(Self.listedWorkers))
        unlistedWorkers = sorted.count - workers.count
    }

    /// All rescued deliveries of the batch.
    public var count: Int { byProvider.values.reduce(0, +) }

    /// The log line's fields: `rescued`, `from` (the names, comma-separated, `+N more` when cut).
    public var logFields: [String: String] {
        let from = workers.joined(separator: ",") + (unlistedWorkers > 0 ? ",+\(unlistedWorkers) more" : "")
        return ["rescued": "\(count)", "from": from]
    }
}
