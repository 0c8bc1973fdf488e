import HTTP2
import Testing
@testable import Worker

/// Which resolver the APNs and FCM clients look a host up on: the providers' own hosts share the process-wide
/// one; a host an app chose (a channel endpoint override, an FCM `token_uri`) goes to the overrides' resolver, so
/// names whose DNS never answers cannot hold up the providers' lookups.
@Suite("Resolver per origin")
struct ResolverChoiceTests {
    @Test func providerHostsShareTheProcessResolverAndOverridesHaveTheirOwn() {
        let overrides = HostResolver(threads: 1, queueCapacity: 1)
        let choose = WorkerRuntime.providerHostsFirst(overrides: overrides)
        for host in ["api.push.apple.com", "api.sandbox.push.apple.com", "fcm.googleapis.com", "oauth2.googleapis.com"] {
            #expect(choose(HTTP2Origin(scheme: .https, host: host, port: 443)) === HostResolver.shared)
        }
        for host in ["a1.slow.example.org", "apns-proxy.example", "push.apple.com"] {
            #expect(choose(HTTP2Origin(scheme: .https, host: host, port: 443)) === overrides)
        }
    }
}
