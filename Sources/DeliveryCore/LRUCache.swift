/// A dictionary that holds at most ``capacity`` entries: inserting into a full one drops the least recently
/// used entry (read or written). A value without locking; owners put it behind their own `Mutex`.
///
/// Used for everything the worker keeps per tenant-chosen key (apps' parsed channels, token managers per
/// key, VAPID tokens per push-service origin), so creating many apps, keys or origins cannot grow memory
/// without limit. Lookups are O(1); an eviction scans the entries (O(capacity)), which only happens when a
/// new key arrives, whose own cost (parsing a key, signing a token) is larger.
///
/// The lookup is `@inlinable` so that the senders, which look up an app's channel and a provider token per
/// delivery, get a version specialized for their key and value types (otherwise every lookup goes through
/// generic metadata at run time).
public struct LRUCache<Key: Hashable, Value> {
    /// The most entries held (at least 1).
    public let capacity: Int
    @usableFromInline var entries: [Key: (value: Value, lastUse: UInt64)] = [:]
    @usableFromInline var clock: UInt64 = 0

    public init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    public var count: Int { entries.count }

    /// The value for `key`, marking it used (one hash lookup).
    @inlinable
    public mutating func value(forKey key: Key) -> Value? {
        guard let index = entries.index(forKey: key) else { return nil }
        clock &+= 1
        entries.values[index].lastUse = clock
        return entries.values[index].value
    }

    /// Stores `value` for `key`, evicting the least recently used entry first when full.
    /// - Returns: the evicted value, if any.
    @discardableResult
    @inlinable
    public mutating func insert(_ value: Value, forKey key: Key) -> Value? {
        clock &+= 1
        var evicted: Value?
        if entries[key] == nil, entries.count >= capacity,
            let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key
        {
            evicted = entries.removeValue(forKey: oldest)?.value
        }
        entries[key] = (value, clock)
        return evicted
    }

    /// Removes every entry for which `isStale` is true.
    public mutating func removeAll(where isStale: (Value) -> Bool) {
        entries = entries.filter { !isStale($0.value.value) }
    }

    /// Every value held, in no particular order (does not mark them used).
    public var values: [Value] { entries.values.map(\.value) }

    /// Whether `key` is held (does not mark it used).
    public func contains(_ key: Key) -> Bool { entries[key] != nil }
}

extension LRUCache: Sendable where Key: Sendable, Value: Sendable {}
