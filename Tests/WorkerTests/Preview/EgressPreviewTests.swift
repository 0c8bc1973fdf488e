import DeliveryCore
import Foundation
import HTTP2
import Testing
@testable import Worker

/// `preview` applies the worker's egress policy: overrides https only, no forbidden literal addresses, unless
/// the operator switch is on.
@Suite("preview: egress policy")
struct EgressPreviewTests {
    func document(provider: String, endpoint: String?, token: String) -> JSONValue {
        var channel: [String: JSONValue] = provider == "apns" ? ["topic": "com.example.app"] : ["project_id": "p"]
        if let endpoint { channel["endpoint"] = .string(endpoint) }
        return [
            "app": ["channels": .object([provider: .object(channel)])],
            "subscription": ["platform": .string(provider == "apns" ? "ios" : provider == "fcm" ? "android" : "web"), "token": .string(token)],
            "notification": ["message": ["contents": ["en": "hi"]]],
        ]
    }

    static let apnsToken = "a0a0aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999"

    /// The bearer token never goes to a cleartext or private override: the decision is the channel error the
    /// worker records, and no request is shown.
    @Test(arguments: [
        ("apns", "http://169.254.169.254"), ("apns", "http://api.push.apple.com"), ("apns", "https://169.254.169.254"),
        ("apns", "https://0xa9fea9fe:443"), ("apns", "https://[::1]:8443"), ("apns", "https://10.0.0.1"),
        ("apns", "https://user:pass@api.push.apple.com"), ("fcm", "http://fcm.googleapis.com"), ("fcm", "https://127.1:8443"),
    ])
    func refusedOverridesAreChannelErrors(_ provider: String, _ endpoint: String) throws {
        let input = document(provider: provider, endpoint: endpoint, token: Self.apnsToken)
        let output = try Preview.run(input)
        #expect(output["request"] == nil)
        #expect(output["decision"]?["action"] == "defer")
        #expect(output["decision"]?["reason"] == "invalid_channel_settings")
        let message = output["decision"]?["detail"]?["error"]?.stringValue ?? ""
        #expect(message.hasPrefix("endpoint "), "\(message)")
        #expect(!message.contains("pass"))
        // With the switch the emulator-style overrides are fine (user info never is).
        let allowed = try Preview.run(input, egressPolicy: .unrestricted)
        #expect((allowed["request"] != nil) == !endpoint.contains("@"))
    }

    @Test func httpsPublicOverridesPass() throws {
        let output = try Preview.run(document(provider: "apns", endpoint: "https://api.sandbox.push.apple.com", token: Self.apnsToken))
        #expect(output["request"]?["origin"] == "https://api.sandbox.push.apple.com")
    }

    /// A Web Push endpoint on a forbidden literal fails as the worker fails it.
    @Test(arguments: ["https://127.0.0.1:1/wpush/x", "https://169.254.169.254/x", "https://2130706433/x", "https://[fd00::1]/x"])
    func forbiddenWebPushEndpoints(_ endpoint: String) throws {
        let output = try Preview.run(document(provider: "webpush", endpoint: nil, token: endpoint))
        #expect(output["decision"]?["action"] == "fail")
        #expect(output["decision"]?["reason"] == "forbidden_endpoint")
        #expect(output["request"] == nil)
        let allowed = try Preview.run(document(provider: "webpush", endpoint: nil, token: endpoint), egressPolicy: .unrestricted)
        #expect(allowed["decision"]?["action"] == "send")
    }
}
