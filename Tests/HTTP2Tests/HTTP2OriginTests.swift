import Testing
@testable import HTTP2

@Suite("HTTP2Origin parsing")
struct HTTP2OriginTests {
    @Test func parsesDefaultsAndPorts() throws {
        let apns = try HTTP2Origin(parsing: "https://api.push.apple.com")
        #expect(apns == HTTP2Origin(scheme: .https, host: "api.push.apple.com", port: 443))
        #expect(apns.authority == "api.push.apple.com")
        let local = try HTTP2Origin(parsing: "http://127.0.0.1:8443/ignored/path?q=1")
        #expect(local == HTTP2Origin(scheme: .http, host: "127.0.0.1", port: 8443))
        #expect(local.authority == "127.0.0.1:8443")
        #expect(try HTTP2Origin(parsing: "http://example.com").port == 80)
        let v6 = try HTTP2Origin(parsing: "https://[::1]:9000")
        #expect(v6.host == "::1" && v6.port == 9000 && v6.authority == "[::1]:9000")
        #expect(v6.description == "https://[::1]:9000")
    }

    @Test(arguments: ["api.push.apple.com", "ftp://x", "https://", "https://host:0", "https://host:99999", "https://host:abc"])
    func rejectsBadInput(_ text: String) {
        #expect {
            _ = try HTTP2Origin(parsing: text)
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == .invalidURL && error.message.contains(text)
        }
    }
}
