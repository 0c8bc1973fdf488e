internal import CNghttp2

/// The header fields of one HEADERS frame about to be submitted, as nghttp2 takes them: `nghttp2_nv` entries
/// pointing into one byte buffer. A connection keeps one and empties it for each frame, so that submitting a
/// request or a response allocates nothing once the buffers have grown (nghttp2 copies the fields during the
/// submit call; the storage is only needed for that call).
struct HeaderFieldList {
    private var bytes: [UInt8] = []
    /// (name start, name length, value start, value length) in `bytes`: offsets, since `bytes` may move as it grows.
    private var spans: [(Int, Int, Int, Int)] = []
    private var entries: [nghttp2_nv] = []

    /// Empties the list, keeping its storage.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        spans.removeAll(keepingCapacity: true)
    }

    /// Appends a field; `name` must already be lower case (RFC 9113 §8.2.1), see `String.lowercasedFieldName`.
    mutating func append(_ name: String, _ value: String) {
        let nameStart = bytes.count
        appendBytes(of: name)
        let valueStart = bytes.count
        appendBytes(of: value)
        spans.append((nameStart, valueStart - nameStart, valueStart, bytes.count - valueStart))
    }

    /// A native string's UTF-8 is contiguous: copied as one block rather than through the generic sequence path.
    private mutating func appendBytes(of text: String) {
        if text.utf8.withContiguousStorageIfAvailable({ bytes.append(contentsOf: $0) }) == nil {
            bytes.append(contentsOf: text.utf8)
        }
    }

    /// Appends a field whose value is `value` in decimal (`:status`, `content-length`), without building a String.
    mutating func append(_ name: String, decimal value: Int) {
        let nameStart = bytes.count
        appendBytes(of: name)
        let valueStart = bytes.count
        var remaining = value.magnitude
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(remaining % 10))
            remaining /= 10
        } while remaining > 0
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // Reversed in place by index: reversing the slice `bytes[valueStart...]` copied the whole buffer.
        var low = valueStart, high = bytes.count - 1
        while low < high {
            bytes.swapAt(low, high)
            low += 1
            high -= 1
        }
        spans.append((nameStart, valueStart - nameStart, valueStart, bytes.count - valueStart))
    }

    /// True when a field is named `name` (compared byte for byte: names here are lower case).
    func contains(name: String) -> Bool {
        let wanted = name.utf8
        return spans.contains { span in
            span.1 == wanted.count && bytes[span.0..<(span.0 + span.1)].elementsEqual(wanted)
        }
    }

    /// Calls `body` with the `nghttp2_nv` array (valid for the call only).
    mutating func withNameValues<T>(_ body: (UnsafePointer<nghttp2_nv>, Int) -> T) -> T {
        if bytes.isEmpty { bytes.append(0) }
        // Taken out for the call (and put back after): the entries are filled while `bytes` is borrowed.
        var entries = self.entries
        self.entries = []
        entries.removeAll(keepingCapacity: true)
        defer { self.entries = entries }
        return bytes.withUnsafeBufferPointer { buffer in
            let base = UnsafeMutablePointer(mutating: buffer.baseAddress!)
            for span in spans {
                entries.append(nghttp2_nv(name: base + span.0, value: base + span.2, namelen: span.1, valuelen: span.3,
                                          flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return entries.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }
}
