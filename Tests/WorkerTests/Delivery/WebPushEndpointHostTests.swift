import HTTP2
import Providers
import Testing
@testable import Worker

/// The one host the Web Push sender connects to, names in `:authority` and signs into the VAPID `aud`: the
/// endpoint's ASCII host as the egress policy's WHATWG host parser reads it. No sockets.
@Suite struct WebPushEndpointHostTests {
    func checked(_ url: String, policy: EgressPolicy = .unrestricted) throws -> WebPushEndpoint? {
        WebPushSender.checkedEndpoint(try WebPushEndpoint(parsing: url), policy: policy)
    }

    @Test func anALabelHostPassesTheEgressParserUnchanged() throws {
        // Before: Foundation's `host` gave "push.пример.com", which the egress parser refuses.
        let endpoint = try #require(try checked("https://push.xn--e1afmkfd.com/wpush/v2/abc", policy: .publicInternetOnly))
        #expect(endpoint.host == "push.xn--e1afmkfd.com")
        #expect(endpoint.origin == "https://push.xn--e1afmkfd.com")
        #expect(HTTP2Origin(scheme: .https, host: endpoint.host, port: endpoint.port).authority == "push.xn--e1afmkfd.com")
        // A Unicode host reaches the parser as its A-labels too.
        #expect(try checked("https://push.пример.com/x", policy: .publicInternetOnly)?.host == "push.xn--e1afmkfd.com")
    }

    @Test func addressSpellingsBecomeOneCanonicalHost() throws {
        let spelled = try #require(try checked("https://0x7f.1:8443/x"))
        #expect(spelled.host == "127.0.0.1")
        #expect(spelled.origin == "https://127.0.0.1:8443", "the aud names the address connected to")
        let v6 = try #require(try checked("https://[2001:DB8::0:1]/x"))
        #expect(v6.host == "2001:db8::1")
        #expect(v6.origin == "https://[2001:db8::1]")
        #expect(HTTP2Origin(scheme: .https, host: v6.host, port: v6.port).authority == "[2001:db8::1]")
    }

    @Test func refusedHostsAreRefused() throws {
        #expect(try checked("https://127.0.0.1/x", policy: .publicInternetOnly) == nil)
        #expect(try checked("https://a..b/x") == nil, "an empty label")
        #expect(try checked("https://push.example.com/x", policy: .publicInternetOnly)?.host == "push.example.com")
    }
}
