import DeliveryCore
import HTTP2
import Testing
@testable import Worker

@Suite("Egress: settings and outcomes")
struct EgressOutcomeTests {
    func configuration(_ environment: [String: String], _ arguments: [String] = []) throws -> WorkerConfiguration {
        try WorkerConfiguration(
            ConfigurationReader(
                environment: ["PUSHIZO_DATABASE_URL": "dbname=x"].merging(environment) { $1 }, arguments: arguments,
                keys: WorkerConfiguration.keys, booleanKeys: [ConfigurationKey.allowPrivateNetworks.name]))
    }

    /// Off by default; `true` or the bare flag turns it on; anything else names the key.
    @Test func theSwitchIsOffByDefault() throws {
        #expect(try configuration([:]).egressPolicy == .publicInternetOnly)
        #expect(try configuration(["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "true"]).egressPolicy == .unrestricted)
        #expect(try configuration([:], ["--allow-private-networks"]).allowPrivateNetworks)
        #expect(try configuration(["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "false"]).allowPrivateNetworks == false)
        #expect {
            try configuration(["PUSHIZO_ALLOW_PRIVATE_NETWORKS": "sometimes"])
        } throws: { error in
            (error as? ConfigurationError)?.key == "PUSHIZO_ALLOW_PRIVATE_NETWORKS"
        }
    }

    /// A refused address fails at once whatever the transport says about retrying, with nothing from the
    /// error's text in the detail; for a channel's own override it is the channel's configuration error.
    @Test func forbiddenAddressFailsWithAFixedDetail() {
        for safe in [true, false] {
            let error = HTTP2Error(.forbiddenAddress, "push.example resolves to 10.0.0.7 is private (10.0.0.0/8, RFC 1918)", isSafeToRetry: safe)
            let outcome = ProviderTransport.outcome(for: error, origin: "https://push.example")
            guard case .failed(let reason, let detail, let invalidate) = outcome else {
                Issue.record("not failed: \(outcome)")
                continue
            }
            #expect(reason == DeliveryReason.forbiddenEndpoint)
            #expect(!invalidate)
            #expect(!detail.jsonText.contains("10.0.0.7"))
            #expect(!detail.jsonText.contains("push.example"))
            #expect(ProviderTransport.channelEndpointOutcome(outcome) == .channelError(reason: .invalidChannelSettings, detail: detail))
        }
        // Other outcomes pass through unchanged.
        let unreachable = ProviderTransport.outcome(for: HTTP2Error(.connectFailed, "x", isSafeToRetry: true), origin: "o")
        #expect(ProviderTransport.channelEndpointOutcome(unreachable) == unreachable)
    }

    @Test(arguments: [
        ("https://api.push.apple.com", true), ("https://API.push.apple.com:443/x", true), ("http://api.push.apple.com", false),
        ("https://127.0.0.1:8443", false), ("https://0x7f.1", false), ("https://[::1]", false), ("https://[fe80::1%25eth0]", false),
        ("https://u:p@api.push.apple.com", false), ("ftp://api.push.apple.com", false), ("https://1.2.3.4.5", false),
    ])
    func channelEndpoints(_ url: String, _ allowed: Bool) {
        let origin = try? ChannelEndpoint.origin(url, policy: .publicInternetOnly)
        #expect((origin != nil) == allowed, "\(url)")
        do {
            _ = try ChannelEndpoint.origin(url, policy: .publicInternetOnly)
        } catch {
            #expect(!error.message.contains("u:p"))
        }
    }
}
