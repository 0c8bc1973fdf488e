/// TLS settings for `HTTP2Client`: TLS 1.2 or newer, ALPN `h2`, SNI, certificate chain and host-name
/// verification (RFC 9113 §9.2, RFC 6125).
public struct TLSClientConfiguration: Sendable {
    /// Which certificate authorities are trusted.
    public enum TrustRoots: Sendable, Equatable {
        /// The system store (`SSL_CTX_set_default_verify_paths`, Debian's /etc/ssl/certs).
        case system
        /// Only the CA certificates in this PEM file (`SSL_CTX_load_verify_locations`).
        case pemFile(String)
    }

    /// A certificate + private key presented to servers that ask for one (TLS client authentication, e.g.
    /// APNs certificate-based provider authentication). One identity per `HTTP2Client`.
    public enum ClientIdentity: Sendable, Equatable {
        /// PEM files: the certificate chain (leaf first) and the private key.
        case pemFiles(certificateChain: String, privateKey: String)
        /// PEM bytes held in memory (e.g. loaded from the database); the key never appears in errors.
        case pem(certificateChain: [UInt8], privateKey: [UInt8])
    }


    public var trustRoots: TrustRoots
    /// Client certificate for TLS client authentication; nil = none.
    public var clientIdentity: ClientIdentity?
    /// Lowest protocol version accepted: always TLS 1.2 (RFC 9113 §9.2 requires 1.2 or later).
    public var minimumVersion: String { "TLSv1.2" }

    public init(trustRoots: TrustRoots = .system, clientIdentity: ClientIdentity? = nil) {
        self.trustRoots = trustRoots
        self.clientIdentity = clientIdentity
    }
}

/// TLS settings for `HTTP2Server`: PEM files, ALPN `h2` selected, TLS 1.2 or newer.
public struct TLSServerConfiguration: Sendable {
    /// PEM file: the leaf certificate first, then intermediates.
    public var certificateChainFile: String
    /// PEM file with the private key of the leaf (PKCS#8 or traditional).
    public var privateKeyFile: String
    /// When set, clients must present a certificate that verifies against the CA certificates in this PEM file
    /// (TLS client authentication); its subject reaches handlers as `HTTP2ServerRequest.clientCertificateSubject`.
    public var clientCertificateTrustFile: String?
    /// With `clientCertificateTrustFile`: a client may present no certificate, or one that does not verify,
    /// and the handshake still completes; the handler sees the certificate and the verdict
    /// (`HTTP2ServerRequest.clientCertificateDER`, `clientCertificateVerified`) and answers at the HTTP level, as
    /// APNs does (403 `BadCertificate`).
    public var clientCertificatesOptional = false

    public init(certificateChainFile: String, privateKeyFile: String, clientCertificateTrustFile: String? = nil) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
        self.clientCertificateTrustFile = clientCertificateTrustFile
    }
}

extension TLSClientConfiguration.ClientIdentity: CustomStringConvertible, CustomDebugStringConvertible {
    /// Redacted: names files, never prints PEM bytes (the private key is a secret).
    public var description: String {
        switch self {
        case .pemFiles(let chain, let key): return "pemFiles(certificateChain: \(chain), privateKey: \(key))"
        case .pem(let chain, _): return "pem(certificateChain: \(chain.count) bytes, privateKey: <redacted>)"
        }
    }
    public var debugDescription: String { description }
}
