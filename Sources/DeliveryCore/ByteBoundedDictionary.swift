/// A dictionary bounded by entries and by bytes (each entry's cost as its owner measures it): storing into one
/// that would go past either bound empties it first, and an entry costing more than the whole budget is not
/// kept. A value without locking; owners put it behind their own `Mutex`.
///
/// For caches of what producers decide the size of (message documents, rendered payloads, user tags):
/// starting over is O(1) per store and keeps memory under ``byteBudget`` whatever arrives, where exact
/// least-recently-used eviction (``LRUCache``) would scan on every insert into a full cache.
///
/// Reads and stores are `@inlinable` so that the caches, which use them per delivery, get versions specialized
/// for their key and value types (otherwise every call goes through generic metadata at run time).
public struct ByteBoundedDictionary<Key: Hashable, Value> {
    /// The most entries held (at least 1).
    public let capacity: Int
    /// The most bytes held: the sum of the entries' costs.
    public let byteBudget: Int
    @usableFromInline var entries: [Key: (value: Value, cost: Int)] = [:]
    /// Bytes held now.
    public var bytes: Int { held }
    @usableFromInline var held = 0

    public init(capacity: Int, byteBudget: Int) {
        self.capacity = max(capacity, 1)
        self.byteBudget = byteBudget
    }

    public var count: Int { entries.count }

    @inlinable
    public subscript(key: Key) -> Value? { entries[key]?.value }

    /// Stores `value` for `key` at `cost` bytes, replacing what `key` held. Empties the dictionary first when
    /// it is full or the value would go past the budget; keeps nothing when `cost` alone exceeds the budget.
    @inlinable
    public mutating func store(_ value: Value, cost: Int, forKey key: Key) {
        if let old = entries.removeValue(forKey: key) { held -= old.cost }
        if entries.count >= capacity || held + cost > byteBudget {
            entries.removeAll(keepingCapacity: true)
            held = 0
        }
        guard cost <= byteBudget else { return }
        entries[key] = (value, cost)
        held += cost
    }
}

extension ByteBoundedDictionary: Sendable where Key: Sendable, Value: Sendable {}
