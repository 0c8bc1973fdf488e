extension String {
    /// Whether every UTF-8 byte satisfies `test` (true for ""), read in place when the string has contiguous UTF-8,
    /// as native strings do, instead of through the view's iterator: bearer tokens and device tokens are checked
    /// for every request.
    @inline(__always)
    func everyUTF8Byte(_ test: (UInt8) -> Bool) -> Bool {
        utf8.withContiguousStorageIfAvailable { $0.allSatisfy(test) } ?? utf8.allSatisfy(test)
    }
}
