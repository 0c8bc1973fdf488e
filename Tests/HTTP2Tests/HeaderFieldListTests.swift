internal import CNghttp2
import Testing
@testable import HTTP2

/// The fields handed to nghttp2 read back exactly as appended, decimals included, across reuses of one list.
@Suite("HeaderFieldList")
struct HeaderFieldListTests {
    private static func fields(_ list: inout HeaderFieldList) -> [(String, String)] {
        list.withNameValues { entries, count in
            (0..<count).map { index in
                let entry = entries[index]
                return (String(decoding: UnsafeBufferPointer(start: entry.name, count: entry.namelen), as: UTF8.self),
                        String(decoding: UnsafeBufferPointer(start: entry.value, count: entry.valuelen), as: UTF8.self))
            }
        }
    }

    @Test func fieldsAndDecimalsReadBackAcrossReuses() {
        var list = HeaderFieldList()
        for round in 0..<3 {
            list.removeAll()
            list.append(":method", "POST")
            for value in [0, 7, 10, 404, 1_234_567_890, -42, Int.max, Int.min + 1] {
                list.append("n\(round)", decimal: value)
            }
            list.append("apns-topic", "com.example.app ünïcødé")
            let read = Self.fields(&list)
            #expect(read.map(\.1) == ["POST", "0", "7", "10", "404", "1234567890", "-42", String(Int.max), String(Int.min + 1),
                                     "com.example.app ünïcødé"])
            #expect(read.dropFirst().dropLast().allSatisfy { $0.0 == "n\(round)" })
            #expect(list.contains(name: "apns-topic") && !list.contains(name: "apns-top"))
        }
        list.removeAll()
        #expect(Self.fields(&list).isEmpty)
    }
}
