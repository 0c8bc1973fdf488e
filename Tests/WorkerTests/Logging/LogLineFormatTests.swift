import Foundation
import Testing

@testable import Worker

/// Log lines: the `<N>` priority only when stderr is the journal's stream; JSON values typed.
@Suite("Log line format")
struct LogLineFormatTests {
    @Test func thePriorityPrefixIsForTheJournalOnly() throws {
        var logger = Logger(label: "worker")
        logger.priorityPrefix = false
        #expect(logger.render(.warning, "hello", [:]) == "worker: hello\n")
        logger.priorityPrefix = true
        #expect(logger.render(.warning, "hello", [:]) == "<4>worker: hello\n")
        // Whether a descriptor is the stream JOURNAL_STREAM names: its device and inode, nothing else.
        let pipe = Pipe()
        var status = stat()
        #expect(fstat(pipe.fileHandleForWriting.fileDescriptor, &status) == 0)
        let value = "\(status.st_dev):\(status.st_ino)"
        #expect(JournalStream.matches(value, descriptor: pipe.fileHandleForWriting.fileDescriptor))
        #expect(!JournalStream.matches(nil, descriptor: pipe.fileHandleForWriting.fileDescriptor))
        #expect(!JournalStream.matches("garbage", descriptor: pipe.fileHandleForWriting.fileDescriptor))
    }

    @Test func jsonFieldsKeepTheirTypes() throws {
        let logger = Logger(label: "worker", format: .json)
        let line = logger.render(.info, "sent", ["count": "12", "ratio": "0.5", "ok": "true", "id": "host-a:17", "zip": "007"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["count"] as? Int == 12)
        #expect(object["ratio"] as? Double == 0.5)
        #expect(object["ok"] as? Bool == true)
        #expect(object["id"] as? String == "host-a:17")
        #expect(object["zip"] as? String == "007")
        #expect(object["message"] as? String == "sent")
    }
}
