import Testing
@testable import HTTP2

/// The key a lookup's domain share is kept under: the registrable domain by the Public Suffix List built into
/// libpsl; a public suffix itself, or an address literal, is its own key.
@Suite("Registrable domain of a host")
struct RegistrableDomainTests {
    @Test(arguments: [
        ("h1.slow.example.org", "example.org"),
        ("H2.Slow.Example.ORG", "example.org"),
        ("example.org.", "example.org"),
        ("a.b.example.co.uk", "example.co.uk"),
        // Suffixes anyone may register under (the list's private section): each registered name is its own key.
        ("a.github.io", "a.github.io"),
        ("x.y.github.io", "y.github.io"),
        ("wns2-bl2p.notify.windows.com", "windows.com"),
        ("updates.push.services.mozilla.com", "mozilla.com"),
        // A public suffix, or a name the list cannot place, is its own key.
        ("github.io", "github.io"),
        ("com", "com"),
        ("localhost", "localhost"),
        // Address literals: the list would read 127.0.0.1 as a name under `1`.
        ("127.0.0.1", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("2001:db8::1", "2001:db8::1"),
    ])
    func key(_ host: String, _ expected: String) {
        #expect(RegistrableDomain.key(of: host) == expected)
    }
}
