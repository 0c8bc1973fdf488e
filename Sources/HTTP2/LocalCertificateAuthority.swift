internal import COpenSSL
internal import Glibc

/// A throwaway certificate authority and a server certificate signed by it, made with OpenSSL's X509 APIs: for
/// tests, the demo and `pushizo-worker emulator`. Never use these for production traffic.
public enum LocalCertificateAuthority {
    /// PEM file paths written by `generate`.
    public struct Files: Sendable {
        /// The CA certificate: give it to `TLSClientConfiguration(trustRoots: .pemFile(...))`.
        public var caCertificate: String
        /// Leaf certificate followed by the CA certificate: `TLSServerConfiguration.certificateChainFile`.
        public var certificateChain: String
        /// The leaf's private key (PKCS#8 PEM, file mode 0600): `TLSServerConfiguration.privateKeyFile`.
        public var privateKey: String

        public init(caCertificate: String, certificateChain: String, privateKey: String) {
            self.caCertificate = caCertificate
            self.certificateChain = certificateChain
            self.privateKey = privateKey
        }
    }

    /// Writes `ca.pem`, `chain.pem` and `key.pem` into `directory` (created if missing, mode 0700).
    /// Keys are ECDSA P-256; the CA has `CA:TRUE` and keyCertSign; the leaf has subjectAltName entries for
    /// `hostnames` (IP literals become `IP:` entries, RFC 5280 §4.2.1.6), extendedKeyUsage serverAuth + clientAuth (so it can also serve as a test client identity), and is
    /// valid from one hour ago for 365 days.
    /// - Throws: `HTTP2Error(.setupFailed)` when a file cannot be written or OpenSSL fails.
    public static func generate(in directory: String, hostnames: [String] = ["localhost", "127.0.0.1"]) throws -> Files {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw HTTP2Error(.setupFailed, "cannot create \(directory): \(errnoText())")
        }
        let caKey = try generateP256Key()
        defer { EVP_PKEY_free(caKey) }
        let leafKey = try generateP256Key()
        defer { EVP_PKEY_free(leafKey) }

        let ca = try makeCertificate(subjectCN: "Pushizo Local Test CA", key: caKey, issuer: nil, issuerKey: caKey, extensions: [
            (NID_basic_constraints, "critical,CA:TRUE"),
            (NID_key_usage, "critical,keyCertSign,cRLSign"),
            (NID_subject_key_identifier, "hash"),
        ])
        defer { X509_free(ca) }
        let san = hostnames.map { SocketAddress.literal($0, port: 0) != nil ? "IP:\($0)" : "DNS:\($0)" }.joined(separator: ",")
        let leaf = try makeCertificate(subjectCN: hostnames.first ?? "localhost", key: leafKey, issuer: ca, issuerKey: caKey, extensions: [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"),
            (NID_ext_key_usage, "serverAuth,clientAuth"),
            (NID_subject_alt_name, san),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ])
        defer { X509_free(leaf) }

        let files = Files(caCertificate: directory + "/ca.pem", certificateChain: directory + "/chain.pem",
                          privateKey: directory + "/key.pem")
        let caPEM = try pem { PEM_write_bio_X509($0, ca) }
        let leafPEM = try pem { PEM_write_bio_X509($0, leaf) }
        let keyPEM = try pem { PEM_write_bio_PrivateKey($0, leafKey, nil, nil, 0, nil, nil) }
        try write(caPEM, to: files.caCertificate, mode: 0o644)
        try write(leafPEM + caPEM, to: files.certificateChain, mode: 0o644)
        try write(keyPEM, to: files.privateKey, mode: 0o600)
        return files
    }

    private static func failure(_ what: String) -> HTTP2Error {
        HTTP2Error(.setupFailed, "certificate generation failed (\(what)): \(drainOpenSSLErrors())")
    }

    private static func generateP256Key() throws -> OpaquePointer {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw failure("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1,
              EVP_PKEY_CTX_set_group_name(ctx, "prime256v1") == 1,
              EVP_PKEY_generate(ctx, &key) == 1, let key else { throw failure("P-256 key generation") }
        return key
    }

    private static func makeCertificate(subjectCN: String, key: OpaquePointer, issuer: OpaquePointer?, issuerKey: OpaquePointer,
                                        extensions: [(Int32, String)]) throws -> OpaquePointer {
        guard let cert = X509_new() else { throw failure("X509_new") }
        do {
            guard X509_set_version(cert, 2) == 1 else { throw failure("X509_set_version") }
            var serial = [UInt8](repeating: 0, count: 16)
            guard RAND_bytes(&serial, 16) == 1 else { throw failure("RAND_bytes") }
            serial[0] &= 0x7f  // positive (RFC 5280 §4.1.2.2)
            guard let bn = BN_bin2bn(serial, 16, nil) else { throw failure("BN_bin2bn") }
            defer { BN_free(bn) }
            guard BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nil else { throw failure("serial") }
            // Back-dated an hour so small clock differences do not matter.
            guard X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nil,
                  X509_gmtime_adj(X509_getm_notAfter(cert), 365 * 24 * 3600) != nil else { throw failure("validity") }
            guard X509_set_pubkey(cert, key) == 1 else { throw failure("X509_set_pubkey") }
            let name = X509_get_subject_name(cert)
            guard X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, subjectCN, -1, -1, 0) == 1 else { throw failure("subject") }
            guard X509_set_issuer_name(cert, issuer.map { X509_get_subject_name($0) } ?? name) == 1 else { throw failure("issuer") }
            var context = X509V3_CTX()
            X509V3_set_ctx(&context, issuer ?? cert, cert, nil, nil, 0)
            for (nid, value) in extensions {
                guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else { throw failure("extension \(nid)") }
                defer { X509_EXTENSION_free(ext) }
                guard X509_add_ext(cert, ext, -1) == 1 else { throw failure("X509_add_ext") }
            }
            guard X509_sign(cert, issuerKey, EVP_sha256()) > 0 else { throw failure("X509_sign") }
            return cert
        } catch {
            X509_free(cert)
            throw error
        }
    }

    private static func pem(_ writer: (OpaquePointer) -> Int32) throws -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw failure("BIO_new") }
        defer { BIO_free(bio) }
        guard writer(bio) == 1 else { throw failure("PEM write") }
        var bytes = [UInt8](repeating: 0, count: Int(BIO_ctrl_pending(bio)))
        let n = BIO_read(bio, &bytes, Int32(bytes.count))
        guard n == Int32(bytes.count) else { throw failure("BIO_read") }
        return bytes
    }

    private static func write(_ bytes: [UInt8], to path: String, mode: mode_t) throws {
        _ = unlink(path)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw HTTP2Error(.setupFailed, "cannot write \(path): \(errnoText())") }
        defer { close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            guard n > 0 else { throw HTTP2Error(.setupFailed, "cannot write \(path): \(errnoText())") }
            offset += n
        }
    }
}
