/// The form of an APNs device token as a provider sends it in the request path (`/3/device/<token>`): hexadecimal
/// characters, an even number of them (Apple, "Sending notification requests to APNs"; 64 today, up to 200 accepted
/// here since Apple says the length may grow).
public enum APNsDeviceToken {
    /// Accepted lengths in characters (UTF-8 bytes).
    public static let lengths = 64...200

    /// Whether every character of `token` is a hexadecimal digit (`0-9`, `a-f`, `A-F`; true for ""): the worker
    /// checks every request it builds and the emulator every request it receives.
    public static func isHexadecimal(_ token: String) -> Bool {
        token.everyUTF8Byte(isHexDigit)
    }

    /// Whether `token` has one of ``lengths``, an even number, and only hexadecimal digits.
    public static func isWellFormed(_ token: String) -> Bool {
        let count = token.utf8.count
        return lengths.contains(count) && count % 2 == 0 && isHexadecimal(token)
    }

    /// `0-9`, `a-f` or `A-F`, as two wrapping subtractions and compares instead of three range tests (setting
    /// bit 5 folds `A-F` onto `a-f` and maps no other byte into `a-f`): every request's token is checked.
    @inline(__always)
    static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte &- UInt8(ascii: "0") < 10) || ((byte | 0x20) &- UInt8(ascii: "a") < 6)
    }
}
