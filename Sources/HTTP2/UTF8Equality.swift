internal import Glibc

extension String {
    /// Whether this string's UTF-8 is exactly `bytes`: compared in place with `memcmp` when the string is stored
    /// contiguously (native strings are), at once when both are the same buffer. Bytes, not `==`: Swift's string
    /// equality is canonical equivalence, under which U+212A KELVIN SIGN equals the ASCII "K".
    func hasUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard utf8.count == bytes.count else { return false }
        return utf8.withContiguousStorageIfAvailable { own in
            own.isEmpty || own.baseAddress == bytes.baseAddress || memcmp(own.baseAddress!, bytes.baseAddress!, own.count) == 0
        } ?? utf8.elementsEqual(bytes)
    }

    /// Whether `other` holds the same UTF-8 bytes (see ``hasUTF8(_:)``).
    func hasSameUTF8(as other: String) -> Bool {
        other.utf8.withContiguousStorageIfAvailable { hasUTF8($0) } ?? utf8.elementsEqual(other.utf8)
    }
}
