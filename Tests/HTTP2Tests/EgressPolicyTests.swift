import Foundation
import Testing
@testable import HTTP2

@Suite("Egress policy: host spellings")
struct EgressHostTests {
    /// Every spelling a WHATWG URL parser turns into an address becomes that address.
    @Test(arguments: [
        ("127.0.0.1", "127.0.0.1"), ("2130706433", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
        ("0x7F.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"), ("127.0.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"), ("0", "0.0.0.0"), ("0x", "0.0.0.0"),
        ("169.254.169.254", "169.254.169.254"), ("2852039166", "169.254.169.254"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"), ("169.16689662", "169.254.169.254"), ("10.1", "10.0.0.1"),
        ("00000000000000000000127.1", "87.0.0.1"), ("000000000000000000000177.1", "127.0.0.1"), ("0x00000000000000000000007f.1", "127.0.0.1"),
        ("4294967295", "255.255.255.255"), ("8.8.8.8", "8.8.8.8"),
        ("[::1]", "::1"), ("::1", "::1"), ("[0:0:0:0:0:0:0:1]", "::1"), ("[::]", "::"), ("[::FFFF:127.0.0.1]", "::ffff:7f00:1"),
        ("[::ffff:7f00:1]", "::ffff:7f00:1"), ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"), ("[fe80::1]", "fe80::1"),
        ("[2001:db8::]", "2001:db8::"), ("[1:2:3:4:5:6:7::]", "1:2:3:4:5:6:7:0"), ("[::2:3:4:5:6:7:8]", "0:2:3:4:5:6:7:8"),
        ("[1:2:3:4:5:6:1.2.3.4]", "1:2:3:4:5:6:102:304"), ("[2606:4700::6810:84e5]", "2606:4700::6810:84e5"),
    ])
    func normalizesAddressSpellings(_ host: String, _ expected: String) throws {
        guard case .address(let address) = try EgressHost(parsing: host) else {
            Issue.record("\(host) parsed as a name")
            return
        }
        #expect(address.description == expected)
    }

    @Test(arguments: [
        ("push.example.com", "push.example.com"), ("PUSH.Example.COM", "push.example.com"), ("localhost", "localhost"),
        ("localhost.", "localhost"), ("a-b_c.example", "a-b_c.example"), ("1.2.3.example", "1.2.3.example"),
        ("0x7f.example", "0x7f.example"), ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ])
    func keepsNames(_ host: String, _ expected: String) throws {
        let parsed = try EgressHost(parsing: host)
        #expect(parsed == .name(expected))
    }

    /// Spellings that a URL parser would decode into something else, or that are no host at all, are refused.
    @Test(arguments: [
        "", ".", "..", "a..b", "1.2.3.4.5", "256.0.0.1", "1.2.3.256", "1.2.65536", "4294967296", "0x100000000",
        "foo.0x10", "foo.1", "09.1.1.1", "0x7g.1", "+1.2.3.4", "1.2.3.+4", "1.2.3.4..", "%31%32%37.0.0.1", "127.0.0.1%00",
        "[fe80::1%25eth0]", "fe80::1%eth0", "[::1", "::1]", "[]", "[1:2:3:4:5:6:7:8:9]", "[1::2::3]", "[:::]", "[1:]",
        "[:1]", "[12345::]", "[::1.2.3]", "[::01.2.3.4]", "[::256.2.3.4]", "[1.2.3.4::]", "[::1.2.3.4:5]",
        "bücher.example", "a b.example", "a/b", "user@host", "host:443", "\u{1b}[31m.example",
        String(repeating: "a", count: 64) + ".example", Array(repeating: "abcdefghi", count: 26).joined(separator: "."),
    ])
    func refusesInvalidSpellings(_ host: String) {
        #expect(throws: EgressRefusal.self) { try EgressHost(parsing: host) }
        do {
            _ = try EgressPolicy.unrestricted.check(host: host)
            Issue.record("\(host) accepted with the switch on")
        } catch {
            #expect(error.kind == .invalidHost)
        }
    }

    /// The IPv6 parser agrees with glibc's `inet_pton` on generated text: valid forms in every compression, and
    /// random strings over the hex/colon/dot alphabet.
    @Test func ipv6ParserAgreesWithInetPton() {
        var generator = SplitMix64(seed: 6)
        var texts: [String] = []
        for _ in 0..<2000 {
            var groups = (0..<8).map { _ in generator.next() % 5 == 0 ? 0 : UInt16(truncatingIfNeeded: generator.next()) }
            if generator.next() % 3 == 0 { groups[0...5] = [0, 0, 0, 0, 0, 0xffff] }
            var parts = groups.map { String($0, radix: 16) }
            if generator.next() % 4 == 0 {
                let v4 = (0..<4).map { _ in String(generator.next() % 256) }.joined(separator: ".")
                parts = Array(parts[0..<6]) + [v4]
            }
            let start = Int(generator.next() % UInt64(parts.count))
            let length = Int(generator.next() % UInt64(parts.count - start + 1))
            if length > 0 && generator.next() % 2 == 0 {
                let before = parts[..<start].joined(separator: ":")
                let after = parts[(start + length)...].joined(separator: ":")
                texts.append(before + "::" + after)
            } else {
                texts.append(parts.joined(separator: ":"))
            }
        }
        let alphabet = Array("0123456789abcdef:.")
        for _ in 0..<20000 {
            let length = Int(generator.next() % 20) + 1
            texts.append(String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] }))
        }
        for text in texts {
            var raw = in6_addr()
            let expected = inet_pton(AF_INET6, text, &raw) == 1 ? withUnsafeBytes(of: raw) { Array($0) } : nil
            let parsed = EgressHost.parseIPv6(Substring(text))?.bytes
            if parsed != expected { Issue.record("\(text): parsed \(String(describing: parsed)), inet_pton \(String(describing: expected))") }
        }
    }

    /// WHATWG's IPv4 number forms match glibc's `inet_aton` (what `getaddrinfo` does with such a host) on
    /// generated dotted numbers in decimal, octal and hex.
    @Test func ipv4ParserAgreesWithInetAton() throws {
        var generator = SplitMix64(seed: 4)
        for _ in 0..<20000 {
            let count = Int(generator.next() % 4) + 1
            let parts = (0..<count).map { index -> String in
                let limit: UInt64 = index == count - 1 ? (1 << (8 * UInt64(5 - count))) + 3 : 260
                let value = generator.next() % limit
                switch generator.next() % 3 {
                case 0: return String(value)
                case 1: return "0" + String(value, radix: 8)
                default: return "0x" + String(value, radix: 16)
                }
            }
            let text = parts.joined(separator: ".")
            var raw = in_addr()
            let expected = inet_aton(text, &raw) != 0 ? withUnsafeBytes(of: raw) { Array($0) } : nil
            let parsed: [UInt8]?
            switch try? EgressHost(parsing: text) {
            case .address(let address)?: parsed = address.bytes
            default: parsed = nil
            }
            if parsed != expected { Issue.record("\(text): parsed \(String(describing: parsed)), inet_aton \(String(describing: expected))") }
        }
    }
}

@Suite("Egress policy: address classification")
struct EgressClassificationTests {
    func address(_ text: String) throws -> IPAddress {
        guard case .address(let address) = try EgressHost(parsing: text) else { throw EgressRefusal(.invalidHost, text) }
        return address
    }

    /// The first and last address of every refused block, and the block named.
    @Test(arguments: [
        ("0.0.0.0", "unspecified"), ("0.255.255.255", "this_network"), ("10.0.0.0", "private"), ("10.255.255.255", "private"),
        ("100.64.0.0", "shared_address_space"), ("100.127.255.255", "shared_address_space"), ("127.0.0.0", "loopback"),
        ("127.255.255.255", "loopback"), ("169.254.0.0", "link_local"), ("169.254.169.254", "link_local"),
        ("169.254.255.255", "link_local"), ("172.16.0.0", "private"), ("172.31.255.255", "private"),
        ("192.0.0.0", "ietf_protocol_assignments"), ("192.0.0.255", "ietf_protocol_assignments"),
        ("192.0.2.0", "documentation"), ("192.0.2.255", "documentation"), ("192.88.99.0", "reserved"),
        ("192.88.99.255", "reserved"), ("192.168.0.0", "private"), ("192.168.255.255", "private"),
        ("198.18.0.0", "benchmarking"), ("198.19.255.255", "benchmarking"), ("198.51.100.0", "documentation"),
        ("198.51.100.255", "documentation"), ("203.0.113.0", "documentation"), ("203.0.113.255", "documentation"),
        ("224.0.0.0", "multicast"), ("239.255.255.255", "multicast"), ("240.0.0.0", "reserved"),
        ("255.255.255.254", "reserved"), ("255.255.255.255", "broadcast"),
        ("::", "unspecified"), ("::1", "loopback"), ("::2", "reserved"), ("::127.0.0.1", "reserved"), ("::8.8.8.8", "reserved"),
        ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link_local"), ("::ffff:10.1.2.3", "private"),
        ("::ffff:0.0.0.0", "unspecified"), ("64:ff9b::127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe", "link_local"),
        ("64:ff9b::192.168.1.1", "private"), ("64:ff9b:1::1", "private"), ("2002:7f00:1::", "loopback"),
        ("2002:a9fe:a9fe::1", "link_local"), ("2002:c0a8:101::", "private"), ("2002:6440::", "shared_address_space"),
        ("100::", "reserved"), ("100::ffff:ffff:ffff:ffff", "reserved"), ("2001::", "reserved"), ("2001:0:ffff::1", "reserved"),
        ("2001:1::1", "ietf_protocol_assignments"), ("2001:1ff:ffff::", "ietf_protocol_assignments"),
        ("2001:db8::", "documentation"), ("2001:db8:ffff::1", "documentation"), ("3fff::", "documentation"),
        ("3fff:fff::1", "documentation"), ("fc00::", "unique_local"), ("fd00:ec2::254", "unique_local"),
        ("fdff:ffff::1", "unique_local"), ("fe80::", "link_local"), ("febf:ffff::1", "link_local"), ("fec0::1", "site_local"),
        ("feff::1", "site_local"), ("ff00::", "multicast"), ("ff02::1", "multicast"), ("1::", "reserved"),
        ("1fff:ffff::", "reserved"), ("4000::", "reserved"), ("e000::1", "reserved"),
    ])
    func refusesSpecialBlocks(_ text: String, _ name: String) throws {
        let address = try address(text)
        let block = EgressPolicy.specialBlock(containing: address)
        #expect(block?.name == name, "\(text)")
        let refusal = EgressPolicy.publicInternetOnly.refusal(for: address)
        #expect(refusal?.kind == block.map { .forbiddenAddress($0) })
        #expect(EgressPolicy.unrestricted.refusal(for: address) == nil)
    }

    /// Addresses just outside every refused block, and ordinary public ones, are allowed, also inside the
    /// IPv4-in-IPv6 forms.
    @Test(arguments: [
        "1.0.0.0", "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255",
        "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "191.255.255.255", "192.0.1.0",
        "192.0.3.0", "192.88.98.255", "192.88.100.0", "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
        "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0", "223.255.255.255",
        "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1", "2000::", "2001:200::", "2001:4860:4860::8888",
        "2001:db7:ffff::", "2001:db9::", "2606:4700::6810:84e5", "3ffe:ffff::", "3fff:1000::", "64:ff9b::1.1.1.1",
    ])
    func allowsPublicAddresses(_ text: String) throws {
        let address = try address(text)
        #expect(EgressPolicy.specialBlock(containing: address) == nil, "\(text)")
        #expect(EgressPolicy.publicInternetOnly.refusal(for: address) == nil)
    }

    /// Every IPv4 /8 (and every /16 inside the mixed ones) is classified; a refused IPv4 address is refused in
    /// every IPv6 form that carries it, and an allowed one allowed.
    @Test func ipv4InIPv6FormsFollowTheIPv4Address() {
        var samples: [UInt32] = []
        for first in UInt32(0)...255 {
            for second in stride(from: UInt32(0), through: 255, by: 17) {
                samples += [first << 24 | second << 16, first << 24 | second << 16 | 0xffff]
            }
        }
        for value in samples {
            let v4 = IPAddress(ipv4: value)
            let refused = EgressPolicy.specialBlock(containing: v4)?.name
            let b = v4.bytes
            let forms: [[UInt8]] = [
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] + b,
                [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0] + b,
                [0x20, 0x02] + b + [0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            ]
            for form in forms {
                let v6 = IPAddress(bytes: form)!
                #expect(EgressPolicy.specialBlock(containing: v6)?.name == refused, "\(v4) as \(v6)")
            }
            // IPv4-compatible (deprecated) is refused whatever it carries.
            let compatible = IPAddress(bytes: [UInt8](repeating: 0, count: 12) + b)!
            #expect(EgressPolicy.specialBlock(containing: compatible) != nil)
        }
    }

    @Test func checkHostRefusesForbiddenLiteralsInEverySpelling() throws {
        for host in ["127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "[::1]", "[::ffff:127.0.0.1]",
                     "169.254.169.254", "0xa9fea9fe", "[64:ff9b::a9fe:a9fe]", "[fd00:ec2::254]", "0", "[::]", "100.100.100.200"] {
            do {
                _ = try EgressPolicy.publicInternetOnly.check(host: host)
                Issue.record("\(host) accepted")
            } catch {
                guard case .forbiddenAddress = error.kind else {
                    Issue.record("\(host): \(error)")
                    continue
                }
            }
            #expect((try? EgressPolicy.unrestricted.check(host: host)) != nil)
        }
        let name = try EgressPolicy.publicInternetOnly.check(host: "push.example.com")
        #expect(name == .name("push.example.com"))
        let address = try EgressPolicy.publicInternetOnly.check(host: "8.8.8.8")
        #expect(address == .address(IPAddress(ipv4: 0x0808_0808)))
    }

    @Test func overridesMustBeHTTPSWithoutTheSwitch() throws {
        do {
            try EgressPolicy.publicInternetOnly.check(scheme: "http", host: "api.push.apple.com")
            Issue.record("http:// accepted without the switch")
        } catch {
            #expect(error.kind == .cleartext)
        }
        try EgressPolicy.publicInternetOnly.check(scheme: "https", host: "api.push.apple.com")
        try EgressPolicy.unrestricted.check(scheme: "http", host: "127.0.0.1")
        #expect(throws: EgressRefusal.self) { try EgressPolicy.publicInternetOnly.check(scheme: "https", host: "169.254.169.254") }
    }
}

/// A small deterministic generator (SplitMix64) so generated cases are the same every run.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE5_E9B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
