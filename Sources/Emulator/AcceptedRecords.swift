/// What an emulator accepted: a total count and the most recent records, trimmed in batches so a full buffer
/// does not cost a copy per request. A value type kept inside each emulator's `Mutex`-guarded state.
struct AcceptedRecords<Record> {
    /// How many records ``recent`` keeps.
    let retainLimit: Int
    /// Every record ever accepted, including those no longer kept.
    private(set) var count = 0
    private var buffer: [Record] = []

    init(retainLimit: Int) {
        self.retainLimit = retainLimit
    }

    mutating func append(_ record: Record) {
        count += 1
        buffer.append(record)
        if buffer.count >= 2 * max(retainLimit, 1) { buffer.removeFirst(buffer.count - retainLimit) }
    }

    /// The most recent records (at most `retainLimit`), oldest first.
    var recent: [Record] { Array(buffer.suffix(retainLimit)) }
}
