import DeliveryCore

/// How many of each leased page's deliveries this worker handed out and has not written back yet, per lease
/// (page and fence): the completion statement that writes a lease's last ones deletes the page
/// (``DeliveryPageStore/complete(on:_:finishedPages:)``). No I/O; the completer holds one under its lock.
struct PageLedger: Sendable, Equatable {
    /// One lease of a page.
    struct Lease: Hashable, Sendable {
        var page: Int64
        var fence: Int64
    }

    private var outstanding: [Lease: Int] = [:]

    /// Leases this worker holds deliveries of.
    var count: Int { outstanding.count }

    /// `deliveries` of `page` were handed out under `fence` (a page's chunk, or its rescue). An older lease of the
    /// same page is forgotten: its waiting completions either take the new fence (adopted) or no longer write.
    mutating func handedOut(page: Int64, fence: Int64, deliveries: Int) {
        guard deliveries > 0 else { return }
        if outstanding.keys.contains(where: { $0.page == page && $0.fence < fence }) {
            outstanding = outstanding.filter { !($0.key.page == page && $0.key.fence < fence) }
        }
        outstanding[Lease(page: page, fence: fence), default: 0] += deliveries
    }

    /// The pages whose every outstanding delivery is completed in `completions` (about to be written).
    func finished(by completions: [DeliveryCompletion]) -> [Int64] {
        counts(completions).compactMap { lease, count in outstanding[lease] == count ? lease.page : nil }.sorted()
    }

    /// `completions` were written (or found their page gone): they are no longer outstanding.
    mutating func written(_ completions: [DeliveryCompletion]) {
        for (lease, count) in counts(completions) {
            guard let left = outstanding[lease] else { continue }
            outstanding[lease] = left > count ? left - count : nil
        }
    }

    private func counts(_ completions: [DeliveryCompletion]) -> [Lease: Int] {
        var counts: [Lease: Int] = [:]
        for completion in completions {
            guard let page = completion.source.pageID else { continue }
            counts[Lease(page: page, fence: completion.fence), default: 0] += 1
        }
        return counts
    }
}
