/// An IPv4 or IPv6 address as its network-order bytes (4 or 16 of them).
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 bytes (IPv6), network order.
    public let bytes: [UInt8]

    /// An IPv4 address from its 32-bit value (`0x7f000001` is 127.0.0.1).
    public init(ipv4 value: UInt32) {
        bytes = [UInt8(value >> 24), UInt8((value >> 16) & 0xff), UInt8((value >> 8) & 0xff), UInt8(value & 0xff)]
    }

    /// An address from 4 (IPv4) or 16 (IPv6) bytes; nil for any other count.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    public var isIPv4: Bool { bytes.count == 4 }

    /// The IPv4 value, for a 4-byte address.
    public var ipv4Value: UInt32? {
        guard isIPv4 else { return nil }
        return bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Dotted decimal for IPv4; for IPv6 the RFC 5952 form (lower case, longest zero run as `::`).
    public var description: String {
        if isIPv4 { return bytes.map(String.init).joined(separator: ".") }
        let groups = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
        var bestStart = -1
        var bestLength = 0
        var index = 0
        while index < 8 {
            guard groups[index] == 0 else { index += 1; continue }
            var end = index
            while end < 8 && groups[end] == 0 { end += 1 }
            if end - index > bestLength && end - index >= 2 { bestStart = index; bestLength = end - index }
            index = end
        }
        func hex(_ range: Range<Int>) -> String { range.map { String(groups[$0], radix: 16) }.joined(separator: ":") }
        guard bestStart >= 0 else { return hex(0..<8) }
        return hex(0..<bestStart) + "::" + hex((bestStart + bestLength)..<8)
    }
}

/// A URL host as the worker connects to it: an IP address or a DNS name.
///
/// Parsing follows the WHATWG URL Standard's host parser ("host parsing", "IPv4 parser", "IPv6 parser"), the
/// parser browsers use for the endpoints they hand out, so every spelling that standard turns into an address
/// (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `[::ffff:127.0.0.1]`, a trailing dot, upper case) becomes that
/// address here too. What it would percent-decode or IDNA-map is refused instead (`%`, non-ASCII), as are IPv6
/// zone identifiers, so no spelling reaches `getaddrinfo` that could mean something else there.
public enum EgressHost: Sendable, Hashable {
    case address(IPAddress)
    /// A DNS name: lower case, labels of `a-z 0-9 - _`, 1...63 bytes each, at most 253 in all, no trailing dot.
    case name(String)

    /// Parses a URL's host (with or without IPv6 brackets).
    /// - Throws: ``EgressRefusal`` with ``EgressRefusal/Kind/invalidHost`` for anything else: empty, `%`
    ///   (percent-encoding, zone ids), non-ASCII, a bad IPv4 or IPv6 literal (e.g. `1.2.3.4.5`, `256.1.1.1`,
    ///   `foo.0x10`), or a label that is empty or too long.
    public init(parsing host: String) throws(EgressRefusal) {
        func invalid(_ why: String) -> EgressRefusal { EgressRefusal(.invalidHost, "host is \(why)") }
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty, bytes.count <= 255 else { throw invalid("empty or longer than 255 bytes") }
        guard bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else { throw invalid("not visible ASCII") }
        guard !bytes.contains(UInt8(ascii: "%")) else { throw invalid("percent-encoded or carries a zone id") }
        if bytes.first == UInt8(ascii: "[") || bytes.contains(UInt8(ascii: ":")) {
            var text = Substring(host)
            if text.hasPrefix("[") {
                guard text.hasSuffix("]"), text.count > 2 else { throw invalid("an unterminated IPv6 literal") }
                text = text.dropFirst().dropLast()
            }
            guard let address = Self.parseIPv6(text) else { throw invalid("not a valid IPv6 literal") }
            self = .address(address)
            return
        }
        var labels = host.lowercased().split(separator: ".", omittingEmptySubsequences: false)
        if labels.count > 1 && labels.last == "" { labels.removeLast() }
        // WHATWG "ends in a number": then the whole host must be an IPv4 address.
        if let last = labels.last, Self.looksNumeric(last) {
            guard let value = Self.parseIPv4(labels) else { throw invalid("not a valid IPv4 address") }
            self = .address(IPAddress(ipv4: value))
            return
        }
        guard labels.count <= 127, labels.reduce(0, { $0 + $1.count + 1 }) - 1 <= 253 else {
            throw invalid("longer than 253 bytes")
        }
        for label in labels {
            guard (1...63).contains(label.utf8.count) else { throw invalid("a name with an empty or over-long label") }
            guard label.utf8.allSatisfy({ Self.isNameByte($0) }) else {
                throw invalid("a name with characters other than letters, digits, '-' and '_'")
            }
        }
        self = .name(labels.joined(separator: "."))
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    /// WHATWG "ends in a number" for the last label: all decimal digits, or `0x` followed by hex digits.
    private static func looksNumeric(_ label: Substring) -> Bool {
        if !label.isEmpty && label.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) { return true }
        guard label.hasPrefix("0x") else { return false }
        return label.dropFirst(2).allSatisfy(\.isHexDigit)
    }

    /// WHATWG IPv4 parser: 1...4 parts, each decimal, octal (leading `0`) or hex (`0x`); the last part fills the
    /// remaining bytes.
    private static func parseIPv4(_ parts: [Substring]) -> UInt32? {
        guard (1...4).contains(parts.count) else { return nil }
        var numbers: [UInt64] = []
        for part in parts {
            var digits = part
            var radix = 10
            if digits.hasPrefix("0x") {
                digits = digits.dropFirst(2)
                radix = 16
            } else if digits.count > 1 && digits.hasPrefix("0") {
                digits = digits.dropFirst()
                radix = 8
            } else if digits.isEmpty {
                return nil
            }
            if digits.isEmpty {
                numbers.append(0)
                continue
            }
            // Longer than any 32-bit value in any radix (leading zeros aside): too big.
            guard digits.allSatisfy({ $0.isASCII && $0.hexDigitValue.map { $0 < radix } == true }) else { return nil }
            let trimmed = digits.drop { $0 == "0" }
            guard trimmed.count <= 11, let value = trimmed.isEmpty ? 0 : UInt64(trimmed, radix: radix) else { return nil }
            numbers.append(value)
        }
        let last = numbers.removeLast()
        guard numbers.allSatisfy({ $0 <= 255 }) else { return nil }
        guard last < (UInt64(1) << (8 * UInt64(4 - numbers.count))) else { return nil }
        var value = last
        for (index, number) in numbers.enumerated() { value += number << (8 * UInt64(3 - index)) }
        return UInt32(value)
    }

    /// RFC 4291 §2.2 text forms: up to 8 groups of 1...4 hex digits, at most one `::`, optionally ending in a
    /// dotted-quad IPv4 address (4 decimal parts 0...255, no leading zeros, as the WHATWG IPv6 parser demands).
    static func parseIPv6(_ text: Substring) -> IPAddress? {
        let utf8 = Array(text.utf8)
        // Split at the one "::", if any: the groups before it, and the groups after it.
        var compression: Int?
        var index = 0
        while index + 1 < utf8.count {
            if utf8[index] == UInt8(ascii: ":") && utf8[index + 1] == UInt8(ascii: ":") {
                guard compression == nil else { return nil }
                compression = index
                index += 2
            } else {
                index += 1
            }
        }
        func groups(_ part: ArraySlice<UInt8>, mayEndInIPv4: Bool) -> [UInt16]? {
            if part.isEmpty { return [] }
            let pieces = part.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
            var result: [UInt16] = []
            for (position, piece) in pieces.enumerated() {
                if mayEndInIPv4 && position == pieces.count - 1 && piece.contains(UInt8(ascii: ".")) {
                    guard let quad = dottedQuad(piece) else { return nil }
                    result += [UInt16(quad >> 16), UInt16(quad & 0xffff)]
                    continue
                }
                guard (1...4).contains(piece.count), piece.allSatisfy({ Character(UnicodeScalar($0)).isHexDigit }),
                    let value = UInt16(String(decoding: piece, as: UTF8.self), radix: 16)
                else { return nil }
                result.append(value)
            }
            return result
        }
        let head: [UInt16]
        var tail: [UInt16] = []
        if let compression {
            guard let before = groups(utf8[..<compression], mayEndInIPv4: false),
                let after = groups(utf8[(compression + 2)...], mayEndInIPv4: true),
                before.count + after.count <= 7
            else { return nil }
            head = before
            tail = after
        } else {
            guard let all = groups(utf8[...], mayEndInIPv4: true), all.count == 8 else { return nil }
            head = all
        }
        let all = head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        return IPAddress(bytes: all.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] })
    }

    /// Strict dotted decimal (4 parts 0...255, no leading zeros), as the WHATWG IPv6 parser reads an embedded
    /// IPv4 address.
    private static func dottedQuad(_ text: ArraySlice<UInt8>) -> UInt32? {
        let parts = text.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                part.count == 1 || part.first != UInt8(ascii: "0"),
                let octet = UInt32(String(decoding: part, as: UTF8.self)), octet <= 255
            else { return nil }
            value = value << 8 | octet
        }
        return value
    }
}

/// A block of addresses that is not the public internet (IANA IPv4 and IPv6 Special-Purpose Address
/// Registries, RFC 6890), and the name used for it in messages and docs.
public struct SpecialAddressBlock: Sendable, Hashable, CustomStringConvertible {
    /// Snake-case name, e.g. `loopback`, `link_local`, `private`.
    public let name: String
    /// The block in CIDR notation, e.g. `169.254.0.0/16`.
    public let block: String
    /// The defining document, e.g. `RFC 3927`.
    public let source: String

    public var description: String { "\(name) (\(block), \(source))" }
}

/// Why an endpoint was refused before any connection.
public struct EgressRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The host is not a spelling the policy accepts (see ``EgressHost/init(parsing:)``).
        case invalidHost
        /// The address (literal or resolved) lies in a block outside the public internet.
        case forbiddenAddress(SpecialAddressBlock)
        /// `http://` (cleartext) where only `https://` is allowed.
        case cleartext
    }

    public let kind: Kind
    /// For the operator (logs, `check`, `preview`): may name the host and the block, never a path.
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// Where the worker may connect: the public internet only (the default), or anything when the operator allows
/// private networks (tests, the demo, emulators on 127.0.0.1).
///
/// Refused without the switch (IANA special-purpose registries, RFC 6890 and the RFCs named per block):
/// - IPv4: `0.0.0.0/8`, `10.0.0.0/8`, `100.64.0.0/10`, `127.0.0.0/8`, `169.254.0.0/16`, `172.16.0.0/12`,
///   `192.0.0.0/24`, `192.0.2.0/24`, `192.88.99.0/24`, `192.168.0.0/16`, `198.18.0.0/15`, `198.51.100.0/24`,
///   `203.0.113.0/24`, `224.0.0.0/4`, `240.0.0.0/4` (with `255.255.255.255`).
/// - IPv6: everything outside global unicast `2000::/3` (`::`, `::1`, `::/96` IPv4-compatible, `100::/64`,
///   `64:ff9b:1::/48`, `fc00::/7`, `fe80::/10`, `fec0::/10`, `ff00::/8`, ...) except the two forms that carry an
///   IPv4 address, and inside it `2001::/23` (Teredo, benchmarking, ORCHID), `2001:db8::/32`, `3fff::/20`.
/// - IPv4 carried in IPv6: IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96` and 6to4 `2002::/16` are judged by
///   the IPv4 address inside them.
public struct EgressPolicy: Sendable, Hashable {
    /// `true`: every address and cleartext `http://` overrides are allowed (the operator switch).
    public var allowsPrivateNetworks: Bool

    public init(allowsPrivateNetworks: Bool) {
        self.allowsPrivateNetworks = allowsPrivateNetworks
    }

    /// Public internet addresses only, https overrides only: the worker's default.
    public static let publicInternetOnly = EgressPolicy(allowsPrivateNetworks: false)
    /// No restriction (the operator switch on; the HTTP/2 library's default, the worker always sets its own).
    public static let unrestricted = EgressPolicy(allowsPrivateNetworks: true)

    /// `nil` when the policy lets the worker connect to `address`, else the refusal naming its block.
    public func refusal(for address: IPAddress) -> EgressRefusal? {
        guard !allowsPrivateNetworks, let block = Self.specialBlock(containing: address) else { return nil }
        return EgressRefusal(.forbiddenAddress(block), "\(address) is \(block.description), not a public internet address")
    }

    /// Checks a URL host before any lookup: parses it (``EgressHost/init(parsing:)``) and checks an address
    /// literal. Returns the parsed host (a name still has to be resolved and its addresses checked).
    /// - Throws: ``EgressRefusal``: an invalid spelling (refused even with the switch on) or a forbidden literal.
    public func check(host: String) throws(EgressRefusal) -> EgressHost {
        let parsed = try EgressHost(parsing: host)
        if case .address(let address) = parsed, let refusal = refusal(for: address) { throw refusal }
        return parsed
    }

    /// Checks an endpoint override URL's scheme and host (`app_channels.endpoint`, a `token_uri`): `https://`
    /// unless the switch is on, and a host ``check(host:)`` accepts.
    /// - Throws: ``EgressRefusal`` with ``EgressRefusal/Kind/cleartext`` for `http://` without the switch.
    public func check(scheme: String, host: String) throws(EgressRefusal) {
        if scheme.lowercased() != "https" && !allowsPrivateNetworks {
            throw EgressRefusal(.cleartext, "\(scheme.lowercased()):// is cleartext; overrides must be https:// (PUSHIZO_ALLOW_PRIVATE_NETWORKS=true allows http:// for emulators)")
        }
        _ = try check(host: host)
    }

    /// The special-purpose block holding `address`, or `nil` for a public internet address.
    public static func specialBlock(containing address: IPAddress) -> SpecialAddressBlock? {
        if let value = address.ipv4Value { return ipv4Block(value) }
        let bytes = address.bytes
        // IPv4 carried in IPv6: judged by the IPv4 address (a mapped address connects to it; NAT64 and 6to4
        // gateways forward to it).
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            return embedded(bytes[12..<16], "IPv4-mapped ::ffff:0:0/96")
        }
        if bytes[0..<12] == [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0] {
            return embedded(bytes[12..<16], "NAT64 64:ff9b::/96")
        }
        if bytes[0] == 0x20 && bytes[1] == 0x02 {
            return embedded(bytes[2..<6], "6to4 2002::/16")
        }
        for (prefix, length, block) in ipv6Blocks where matches(bytes, prefix, length) { return block }
        // Only global unicast 2000::/3 is the public IPv6 internet (RFC 4291 §2.4).
        if bytes[0] & 0xe0 != 0x20 {
            return SpecialAddressBlock(name: "reserved", block: "outside 2000::/3", source: "RFC 4291 §2.4")
        }
        return nil
    }

    private static func embedded(_ bytes: ArraySlice<UInt8>, _ form: String) -> SpecialAddressBlock? {
        let value = bytes.reduce(0) { $0 << 8 | UInt32($1) }
        guard let inner = ipv4Block(value) else { return nil }
        return SpecialAddressBlock(name: inner.name, block: "\(inner.block) as \(form)", source: inner.source)
    }

    private static func ipv4Block(_ value: UInt32) -> SpecialAddressBlock? {
        for (prefix, length, block) in ipv4Blocks where length == 0 || value >> (32 - length) == prefix >> (32 - length) {
            return block
        }
        return nil
    }

    private static func matches(_ bytes: [UInt8], _ prefix: [UInt8], _ length: Int) -> Bool {
        var remaining = length
        var index = 0
        while remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xff << (8 - bits))
            if bytes[index] & mask != prefix[index] & mask { return false }
            remaining -= bits
            index += 1
        }
        return true
    }

    private static func block(_ name: String, _ cidr: String, _ source: String) -> SpecialAddressBlock {
        SpecialAddressBlock(name: name, block: cidr, source: source)
    }

    /// IPv4 blocks that are not the public internet (IANA IPv4 Special-Purpose Address Registry), most specific
    /// first where they nest.
    static let ipv4Blocks: [(UInt32, Int, SpecialAddressBlock)] = [
        (0xffff_ffff, 32, block("broadcast", "255.255.255.255/32", "RFC 919")),
        (0x0000_0000, 32, block("unspecified", "0.0.0.0/32", "RFC 1122")),
        (0x0000_0000, 8, block("this_network", "0.0.0.0/8", "RFC 791")),
        (0x0a00_0000, 8, block("private", "10.0.0.0/8", "RFC 1918")),
        (0x6440_0000, 10, block("shared_address_space", "100.64.0.0/10", "RFC 6598")),
        (0x7f00_0000, 8, block("loopback", "127.0.0.0/8", "RFC 1122")),
        (0xa9fe_0000, 16, block("link_local", "169.254.0.0/16", "RFC 3927")),
        (0xac10_0000, 12, block("private", "172.16.0.0/12", "RFC 1918")),
        (0xc000_0000, 24, block("ietf_protocol_assignments", "192.0.0.0/24", "RFC 6890")),
        (0xc000_0200, 24, block("documentation", "192.0.2.0/24", "RFC 5737")),
        (0xc058_6300, 24, block("reserved", "192.88.99.0/24", "RFC 7526")),
        (0xc0a8_0000, 16, block("private", "192.168.0.0/16", "RFC 1918")),
        (0xc612_0000, 15, block("benchmarking", "198.18.0.0/15", "RFC 2544")),
        (0xc633_6400, 24, block("documentation", "198.51.100.0/24", "RFC 5737")),
        (0xcb00_7100, 24, block("documentation", "203.0.113.0/24", "RFC 5737")),
        (0xe000_0000, 4, block("multicast", "224.0.0.0/4", "RFC 5771")),
        (0xf000_0000, 4, block("reserved", "240.0.0.0/4", "RFC 1112")),
    ]

    /// IPv6 blocks named for messages; everything else outside 2000::/3 is `reserved`.
    static let ipv6Blocks: [([UInt8], Int, SpecialAddressBlock)] = [
        ([UInt8](repeating: 0, count: 16), 128, block("unspecified", "::/128", "RFC 4291")),
        ([UInt8](repeating: 0, count: 15) + [1], 128, block("loopback", "::1/128", "RFC 4291")),
        ([UInt8](repeating: 0, count: 12), 96, block("reserved", "::/96 (IPv4-compatible, deprecated)", "RFC 4291 §2.5.5.1")),
        ([0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], 48, block("private", "64:ff9b:1::/48 (local-use NAT64)", "RFC 8215")),
        ([0x01, 0x00, 0, 0, 0, 0, 0, 0], 64, block("reserved", "100::/64 (discard-only)", "RFC 6666")),
        ([0x20, 0x01, 0x0d, 0xb8], 32, block("documentation", "2001:db8::/32", "RFC 3849")),
        ([0x20, 0x01, 0x00, 0x00], 32, block("reserved", "2001::/32 (Teredo)", "RFC 4380")),
        ([0x20, 0x01, 0x00, 0x00], 23, block("ietf_protocol_assignments", "2001::/23", "RFC 2928")),
        ([0x3f, 0xff, 0x00], 20, block("documentation", "3fff::/20", "RFC 9637")),
        ([0xfc], 7, block("unique_local", "fc00::/7", "RFC 4193")),
        ([0xfe, 0x80], 10, block("link_local", "fe80::/10", "RFC 4291")),
        ([0xfe, 0xc0], 10, block("site_local", "fec0::/10 (deprecated)", "RFC 3879")),
        ([0xff], 8, block("multicast", "ff00::/8", "RFC 4291")),
    ]
}
