import DeliveryCore
import Testing

@Suite("APNs device token form")
struct APNsDeviceTokenTests {
    @Test func hexadecimalDigitsOfEitherCaseAreAccepted() {
        #expect(APNsDeviceToken.isHexadecimal("0123456789abcdefABCDEF"))
        #expect(APNsDeviceToken.isHexadecimal(""))
        for bad in ["g", "0x12", "12 34", "ａ1", "12\u{0}", "-1", "٣"] {
            #expect(!APNsDeviceToken.isHexadecimal(bad), "\(bad)")
        }
    }

    /// Every byte value, against the three ranges written out.
    @Test func exactlyTheTwentyTwoHexadecimalBytesAreDigits() {
        for byte in UInt8.min...UInt8.max {
            let expected = (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
            let text = String(decoding: [UInt8(ascii: "a"), byte, UInt8(ascii: "F")], as: UTF8.self)
            #expect(APNsDeviceToken.isHexadecimal(text) == expected, "byte \(byte)")
        }
    }

    @Test func wellFormedMeansAnEvenLengthFrom64To200() {
        #expect(APNsDeviceToken.isWellFormed(String(repeating: "a", count: 64)))
        #expect(APNsDeviceToken.isWellFormed(String(repeating: "F", count: 200)))
        #expect(!APNsDeviceToken.isWellFormed(String(repeating: "a", count: 62)))
        #expect(!APNsDeviceToken.isWellFormed(String(repeating: "a", count: 65)))
        #expect(!APNsDeviceToken.isWellFormed(String(repeating: "a", count: 202)))
        #expect(!APNsDeviceToken.isWellFormed(String(repeating: "a", count: 63) + "g"))
        // A substring's bridged or shared storage is read the same way.
        let padded = "xx" + String(repeating: "b", count: 64)
        #expect(APNsDeviceToken.isWellFormed(String(padded.dropFirst(2))))
    }
}
