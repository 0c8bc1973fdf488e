import HTTP2

/// The resolvers a worker looks host names up on, one per kind of name, so that names nobody vouches for cannot
/// hold up the names the worker relies on:
///
/// - the providers' own hosts (APNs, FCM and Google's OAuth2 token endpoint, Huawei Push Kit and Huawei's OAuth 2.0
///   token endpoint, which the providers' documentation names) on the process-wide ``HostResolver/shared``, first
///   come first served;
/// - hosts apps chose for their APNs, FCM and Huawei channels (`app_channels.endpoint`, a `token_uri`) on one
///   resolver;
/// - Web Push endpoints, chosen by subscribers, on another.
///
/// The last two share their threads and queues by registrable domain and by app (``HostResolverLimits/untrustedNames``;
/// every request names its app as its ``HTTP2Request/tenant``), so names of one app or one domain whose DNS never
/// answers hold at most their share, and another app's lookup starts at once.
struct WorkerResolvers: Sendable {
    var providers: HostResolver
    var channelOverrides: HostResolver
    var webPush: HostResolver

    /// The providers' hosts, resolved on ``providers``.
    static let providerHosts: Set<String> = [
        APNsSender.productionOrigin.host, APNsSender.sandboxOrigin.host, FCMSender.defaultOrigin.host,
        "oauth2.googleapis.com", HuaweiSender.defaultOrigin.host, "oauth-login.cloud.huawei.com",
    ]

    /// The resolvers `run` uses.
    static func standard() -> WorkerResolvers {
        WorkerResolvers(
            providers: .shared, channelOverrides: HostResolver(limits: .untrustedNames),
            webPush: HostResolver(limits: .untrustedNames))
    }

    /// The APNs and FCM clients' choice per origin (``HTTP2ClientConfiguration/resolver``): ``providers`` for the
    /// providers' own hosts, ``channelOverrides`` for every other host.
    var forAPNsAndFCM: @Sendable (HTTP2Origin) -> HostResolver {
        let (providers, overrides) = (self.providers, channelOverrides)
        return { origin in Self.providerHosts.contains(origin.host) ? providers : overrides }
    }

    /// The Web Push client's choice: ``webPush`` for every origin.
    var forWebPush: @Sendable (HTTP2Origin) -> HostResolver {
        let webPush = self.webPush
        return { _ in webPush }
    }
}
