import Foundation
import Testing
import UUIDText

/// The byte-level UUID text gives exactly what Foundation's `uuidString` (lower-cased) and `UUID(uuidString:)`
/// give, and refuses what they refuse.
@Suite("Canonical UUID text")
struct CanonicalUUIDTextTests {
    @Test func agreesWithFoundation() throws {
        for _ in 0..<500 {
            let id = UUID()
            #expect(CanonicalUUIDText.format(id) == id.uuidString.lowercased())
            #expect(CanonicalUUIDText.parse(id.uuidString) == id)
            #expect(CanonicalUUIDText.parse(id.uuidString.lowercased()) == id)
            var bytes: [UInt8] = [1]
            CanonicalUUIDText.append(id, to: &bytes)
            #expect(bytes == [1] + Array(id.uuidString.lowercased().utf8))
        }
        let fixed = "00112233-4455-6677-8899-AaBbCcDdEeFf"
        #expect(CanonicalUUIDText.parse(fixed) == UUID(uuidString: fixed))
    }

    @Test(arguments: [
        "", "00112233-4455-6677-8899-aabbccddeef", "00112233-4455-6677-8899-aabbccddeeff0",
        "0011223344556677-8899-aabbccddeeff-", "00112233-4455-6677-8899_aabbccddeeff",
        "0011223g-4455-6677-8899-aabbccddeeff", "{00112233-4455-6677-8899-aabbccddeeff}",
        "00112233445566778899aabbccddeeff", "00112233-4455-6677-8899-aabbccddeeé",
    ])
    func refusesWhatFoundationRefuses(malformed: String) {
        #expect(CanonicalUUIDText.parse(malformed) == nil)
        #expect(UUID(uuidString: malformed) == nil)
    }
}
