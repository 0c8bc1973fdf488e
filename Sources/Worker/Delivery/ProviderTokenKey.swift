import Providers

/// The shared provider token a channel's requests carry (docs/provider-tokens.md): the credential it belongs to
/// (an APNs team + key, or a Google service account; ``ProviderTokenCredential``) and the policy it is used and
/// replaced under (``ProviderTokenPolicy``). Named by the senders for a claimed batch
/// (``ProviderSender/sharedTokenKey(for:)``), so the claim can read the fleet's current tokens without knowing
/// any provider's settings. Equal and hashed by the credential's fingerprint (the `provider_tokens` key).
public struct ProviderTokenKey: Sendable, Hashable, CustomStringConvertible {
    public let credential: ProviderTokenCredential
    public let policy: ProviderTokenPolicy

    public init(credential: ProviderTokenCredential, policy: ProviderTokenPolicy) {
        self.credential = credential
        self.policy = policy
    }

    public static func == (lhs: ProviderTokenKey, rhs: ProviderTokenKey) -> Bool {
        lhs.credential.fingerprint == rhs.credential.fingerprint
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(credential.fingerprint)
    }

    /// The credential's kind and fingerprint (never a key).
    public var description: String { credential.description }
}
