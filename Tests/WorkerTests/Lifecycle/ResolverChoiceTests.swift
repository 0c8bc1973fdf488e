import HTTP2
import Testing
@testable import Worker

/// Which resolver the clients look a host up on: the providers' own hosts share the process-wide one; a host an
/// app chose (a channel endpoint override, an FCM `token_uri`) goes to the overrides' resolver and a Web Push
/// endpoint to Web Push's, both shared fairly by registrable domain and app, so names whose DNS never answers
/// cannot hold up the providers' lookups nor another app's.
@Suite("Resolver per origin")
struct ResolverChoiceTests {
    @Test func providerHostsShareTheProcessResolverAndOverridesHaveTheirOwn() {
        let resolvers = WorkerResolvers.standard()
        let choose = resolvers.forAPNsAndFCM
        for host in ["api.push.apple.com", "api.sandbox.push.apple.com", "fcm.googleapis.com", "oauth2.googleapis.com"] {
            #expect(choose(HTTP2Origin(scheme: .https, host: host, port: 443)) === HostResolver.shared)
        }
        for host in ["a1.slow.example.org", "apns-proxy.example", "push.apple.com"] {
            #expect(choose(HTTP2Origin(scheme: .https, host: host, port: 443)) === resolvers.channelOverrides)
        }
        for host in ["fcm.googleapis.com", "updates.push.services.mozilla.com", "a1.slow.example.org"] {
            #expect(resolvers.forWebPush(HTTP2Origin(scheme: .https, host: host, port: 443)) === resolvers.webPush)
        }
        #expect(resolvers.channelOverrides !== resolvers.webPush)
        #expect(HostResolver.shared.limits == .unshared(threads: 4, queueCapacity: 256))
        #expect(resolvers.channelOverrides.limits == .untrustedNames)
        #expect(resolvers.webPush.limits == .untrustedNames)
    }
}
