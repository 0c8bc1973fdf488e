import DeliveryCore
import Testing

@Suite struct ByteBoundedDictionaryTests {
    @Test func aStorePastEitherBoundStartsOver() {
        var entries = ByteBoundedDictionary<String, Int>(capacity: 2, byteBudget: 100)
        entries.store(1, cost: 40, forKey: "a")
        entries.store(2, cost: 40, forKey: "b")
        #expect(entries.count == 2 && entries.bytes == 80)
        // A third key in a full dictionary: it is emptied first.
        entries.store(3, cost: 10, forKey: "c")
        #expect(entries.count == 1 && entries.bytes == 10 && entries["a"] == nil && entries["c"] == 3)
        entries.store(4, cost: 60, forKey: "d")
        #expect(entries.count == 2 && entries.bytes == 70)
        // Past the byte budget: emptied first too.
        entries.store(5, cost: 50, forKey: "e")
        #expect(entries.count == 1 && entries.bytes == 50 && entries["e"] == 5)
    }

    @Test func replacingAKeyFreesItsOldCost() {
        var entries = ByteBoundedDictionary<String, Int>(capacity: 2, byteBudget: 100)
        entries.store(1, cost: 40, forKey: "a")
        entries.store(2, cost: 50, forKey: "b")
        entries.store(3, cost: 45, forKey: "a")
        #expect(entries.count == 2 && entries.bytes == 95 && entries["a"] == 3 && entries["b"] == 2)
    }

    @Test func anEntryOverTheWholeBudgetIsNotKept() {
        var entries = ByteBoundedDictionary<String, Int>(capacity: 4, byteBudget: 100)
        entries.store(1, cost: 10, forKey: "a")
        entries.store(2, cost: 101, forKey: "a")
        #expect(entries["a"] == nil && entries.count == 0 && entries.bytes == 0)
    }
}
