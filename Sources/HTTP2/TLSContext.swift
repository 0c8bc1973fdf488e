internal import COpenSSL
internal import CPushizoOpenSSLShims

/// Owner of an OpenSSL `SSL_CTX`. `@unchecked Sendable`: the context is fully configured in `init` and only read
/// afterwards (`SSL_new`), which OpenSSL allows from any thread.
final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer

    private init(method: OpaquePointer?) throws {
        guard let method, let ctx = SSL_CTX_new(method) else {
            throw HTTP2Error(.setupFailed, "SSL_CTX_new failed: \(drainOpenSSLErrors())")
        }
        self.ctx = ctx
        // RFC 9113 §9.2: TLS 1.2 or later.
        guard pz_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else {
            throw HTTP2Error(.setupFailed, "cannot require TLS 1.2: \(drainOpenSSLErrors())")
        }
        // Non-blocking writes may be retried with a moved buffer and may complete partially.
        _ = pz_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE))
    }

    deinit { SSL_CTX_free(ctx) }

    /// Client context: peer verification against the system store or a PEM bundle.
    static func client(_ configuration: TLSClientConfiguration) throws -> TLSContext {
        let context = try TLSContext(method: TLS_client_method())
        switch configuration.trustRoots {
        case .system:
            guard SSL_CTX_set_default_verify_paths(context.ctx) == 1 else {
                throw HTTP2Error(.tlsHandshakeFailed, "cannot load the system trust store: \(drainOpenSSLErrors())")
            }
        case .pemFile(let path):
            guard SSL_CTX_load_verify_locations(context.ctx, path, nil) == 1 else {
                throw HTTP2Error(.tlsHandshakeFailed, "cannot load trust roots from \(path): \(drainOpenSSLErrors())")
            }
        }
        SSL_CTX_set_verify(context.ctx, SSL_VERIFY_PEER, nil)
        switch configuration.clientIdentity {
        case nil:
            break
        case .pemFiles(let chain, let key)?:
            guard SSL_CTX_use_certificate_chain_file(context.ctx, chain) == 1 else {
                throw HTTP2Error(.tlsHandshakeFailed, "cannot load client certificate chain \(chain): \(drainOpenSSLErrors())")
            }
            guard SSL_CTX_use_PrivateKey_file(context.ctx, key, SSL_FILETYPE_PEM) == 1, SSL_CTX_check_private_key(context.ctx) == 1 else {
                throw HTTP2Error(.tlsHandshakeFailed, "cannot load the client private key \(key) or it does not match the certificate: \(drainOpenSSLErrors())")
            }
        case .pem(let chain, let key)?:
            try context.useIdentity(chainPEM: chain, keyPEM: key)
        }
        return context
    }

    /// A client `SSL` on the connected socket `fd`, set to verify `host` and to offer ALPN `h2`. Fails closed:
    /// every set-up call is checked, and a failure frees the `SSL` and returns an error rather than a
    /// connection whose peer would go unverified (or be verified against another name).
    /// - Parameters:
    ///   - host: the origin's host: an IP literal is checked against the certificate's IP SANs (RFC 6125
    ///     §1.7.2) and sends no SNI (RFC 6066 §3); a name is sent as SNI and checked against the DNS SANs.
    ///   - origin: for messages only.
    /// - Returns: the `SSL` (the caller owns it) or `.tlsHandshakeFailed` naming the call that failed; safe to
    ///   retry, since nothing was sent.
    func clientSession(fd: Int32, host: String, origin: HTTP2Origin) -> Result<OpaquePointer, HTTP2Error> {
        func failure(_ what: String) -> HTTP2Error {
            HTTP2Error(.tlsHandshakeFailed, "TLS set-up for \(origin) failed (\(what)): \(drainOpenSSLErrors())", isSafeToRetry: true)
        }
        ERR_clear_error()
        guard let ssl = SSL_new(ctx) else { return .failure(failure("SSL_new")) }
        let alpn: [UInt8] = [2, UInt8(ascii: "h"), UInt8(ascii: "2")]
        let error: HTTP2Error? = {
            guard SSL_set_fd(ssl, fd) == 1 else { return failure("SSL_set_fd") }
            SSL_set_connect_state(ssl)
            // The one OpenSSL setter that returns 0 on success.
            guard SSL_set_alpn_protos(ssl, alpn, UInt32(alpn.count)) == 0 else { return failure("SSL_set_alpn_protos") }
            if SocketAddress.literal(host, port: 443) != nil {
                guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 else {
                    return failure("X509_VERIFY_PARAM_set1_ip_asc refused the address")
                }
                return nil
            }
            // SSL_set1_host's setter with an explicit length (SSL_set1_host takes a C string): a name with an
            // embedded NUL is refused instead of being cut short and verified as its prefix.
            // An empty name would set no check at all.
            let bytes = Array(host.utf8)
            guard !bytes.isEmpty, X509_VERIFY_PARAM_set1_host(SSL_get0_param(ssl), bytes.map { CChar(bitPattern: $0) }, bytes.count) == 1 else {
                return failure("SSL_set1_host refused the host name")
            }
            guard !bytes.contains(0), pz_SSL_set_tlsext_host_name(ssl, host) == 1 else {
                return failure("SNI host name refused")
            }
            return nil
        }()
        if let error {
            SSL_free(ssl)
            return .failure(error)
        }
        return .success(ssl)
    }

    /// Installs a client certificate chain and key from PEM bytes.
    private func useIdentity(chainPEM: [UInt8], keyPEM: [UInt8]) throws {
        let certificates = try chainPEM.withUnsafeBytes { raw -> [OpaquePointer] in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { throw HTTP2Error(.tlsHandshakeFailed, "BIO_new_mem_buf failed") }
            defer { BIO_free(bio) }
            var list: [OpaquePointer] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { list.append(certificate) }
            ERR_clear_error()  // the loop ends on an expected "no start line"
            return list
        }
        defer { certificates.forEach { X509_free($0) } }
        guard let leaf = certificates.first else {
            throw HTTP2Error(.tlsHandshakeFailed, "the client certificate PEM holds no certificate")
        }
        guard SSL_CTX_use_certificate(ctx, leaf) == 1 else {
            throw HTTP2Error(.tlsHandshakeFailed, "cannot use the client certificate: \(drainOpenSSLErrors())")
        }
        for intermediate in certificates.dropFirst() {
            guard pz_SSL_CTX_add1_chain_cert(ctx, intermediate) == 1 else {
                throw HTTP2Error(.tlsHandshakeFailed, "cannot add a client chain certificate: \(drainOpenSSLErrors())")
            }
        }
        let key = keyPEM.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else {
            // OpenSSL's reason only; never the key bytes.
            throw HTTP2Error(.tlsHandshakeFailed, "cannot parse the client private key PEM: \(drainOpenSSLErrors())")
        }
        defer { EVP_PKEY_free(key) }
        guard SSL_CTX_use_PrivateKey(ctx, key) == 1, SSL_CTX_check_private_key(ctx) == 1 else {
            throw HTTP2Error(.tlsHandshakeFailed, "the client private key does not match the certificate: \(drainOpenSSLErrors())")
        }
    }

    /// Server context: certificate chain + key, ALPN selecting `h2` (RFC 7301 §3.2).
    static func server(_ configuration: TLSServerConfiguration) throws -> TLSContext {
        let context = try TLSContext(method: TLS_server_method())
        guard SSL_CTX_use_certificate_chain_file(context.ctx, configuration.certificateChainFile) == 1 else {
            throw HTTP2Error(.setupFailed, "cannot load certificate chain \(configuration.certificateChainFile): \(drainOpenSSLErrors())")
        }
        guard SSL_CTX_use_PrivateKey_file(context.ctx, configuration.privateKeyFile, SSL_FILETYPE_PEM) == 1,
              SSL_CTX_check_private_key(context.ctx) == 1 else {
            throw HTTP2Error(.setupFailed, "cannot load private key \(configuration.privateKeyFile) or it does not match the certificate: \(drainOpenSSLErrors())")
        }
        if let trust = configuration.clientCertificateTrustFile {
            guard SSL_CTX_load_verify_locations(context.ctx, trust, nil) == 1 else {
                throw HTTP2Error(.setupFailed, "cannot load client CA certificates \(trust): \(drainOpenSSLErrors())")
            }
            if configuration.clientCertificatesOptional {
                // Ask for a certificate, accept any (or none): the verdict stays in SSL_get_verify_result.
                SSL_CTX_set_verify(context.ctx, SSL_VERIFY_PEER, { _, _ in 1 })
            } else {
                SSL_CTX_set_verify(context.ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
            }
        }
        SSL_CTX_set_alpn_select_cb(context.ctx, { _, out, outlen, input, inlen, _ in
            // Walk the client's length-prefixed protocol list for "h2".
            guard let input, let out, let outlen else { return SSL_TLSEXT_ERR_ALERT_FATAL }
            var i = 0
            let total = Int(inlen)
            while i < total {
                let length = Int(input[i])
                if length == 2, i + 2 < total, input[i + 1] == UInt8(ascii: "h"), input[i + 2] == UInt8(ascii: "2") {
                    out.pointee = input + i + 1
                    outlen.pointee = 2
                    return SSL_TLSEXT_ERR_OK
                }
                i += 1 + length
            }
            // No h2: refuse the handshake (RFC 7301 §3.2 no_application_protocol).
            return SSL_TLSEXT_ERR_ALERT_FATAL
        }, nil)
        return context
    }
}

/// Empties OpenSSL's per-thread error queue into one line (library reason strings only, never key material).
func drainOpenSSLErrors() -> String {
    var parts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        parts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return parts.isEmpty ? "no OpenSSL error recorded" : parts.joined(separator: "; ")
}
