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

/// Throwaway TLS client certificates under a throwaway CA of their own: for tests and the emulator (e.g. APNs
/// push certificates with Apple's extensions). Never use these for production traffic.
extension LocalCertificateAuthority {
    /// One client certificate to make.
    public struct ClientCertificateRequest: Sendable {
        /// File name stem: `<name>.pem`, `<name>-key.pem`, `<name>.p12`.
        public var name: String
        /// Subject `CN`.
        public var commonName: String
        /// Subject `UID` (OID 0.9.2342.19200300.100.1.1), e.g. Apple's bundle ID; nil = none.
        public var userID: String?
        /// Extra non-critical extensions by dotted OID, each value the DER that goes inside `extnValue`.
        public var extensions: [(oid: String, der: [UInt8])]
        /// Seconds from now to `notAfter` (negative: already expired; `notBefore` is then a day earlier).
        public var notAfterOffset: Int

        public init(name: String, commonName: String, userID: String? = nil, extensions: [(oid: String, der: [UInt8])] = [],
                    notAfterOffset: Int = 365 * 24 * 3600) {
            self.name = name
            self.commonName = commonName
            self.userID = userID
            self.extensions = extensions
            self.notAfterOffset = notAfterOffset
        }
    }

    /// PEM and PKCS#12 files of one client certificate.
    public struct ClientCertificateFiles: Sendable {
        /// The certificate (PEM).
        public var certificate: String
        /// Its private key (unencrypted PKCS#8 PEM, mode 0600).
        public var privateKey: String
        /// Certificate + key as PKCS#12 (DER, OpenSSL's default PBES2 AES-256, mode 0600), under the given password.
        public var pkcs12: String
    }

    /// Writes `client-ca.pem` (the CA that issued them: a server's `clientCertificateTrustFile`) and the
    /// requested certificates (ECDSA P-256 keys, extendedKeyUsage clientAuth) into `directory`.
    /// - Returns: the CA file's path and each certificate's files by `name`.
    /// - Throws: `HTTP2Error(.setupFailed)` when a file cannot be written or OpenSSL fails.
    public static func generateClientCertificates(
        in directory: String, _ requests: [ClientCertificateRequest], pkcs12Password: String
    ) throws -> (caCertificate: String, certificates: [String: ClientCertificateFiles]) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw HTTP2Error(.setupFailed, "cannot create \(directory): \(errnoText())")
        }
        let caKey = try generateP256Key()
        defer { EVP_PKEY_free(caKey) }
        let ca = try makeCertificate(subjectCN: "Pushizo Local Test Client CA", key: caKey, issuer: nil, issuerKey: caKey, extensions: [
            (NID_basic_constraints, "critical,CA:TRUE"),
            (NID_key_usage, "critical,keyCertSign,cRLSign"),
            (NID_subject_key_identifier, "hash"),
        ])
        defer { X509_free(ca) }
        let caPath = directory + "/client-ca.pem"
        try write(try pem { PEM_write_bio_X509($0, ca) }, to: caPath, mode: 0o644)
        var files: [String: ClientCertificateFiles] = [:]
        for request in requests {
            let key = try generateP256Key()
            defer { EVP_PKEY_free(key) }
            let certificate = try makeCertificate(subjectCN: request.commonName, key: key, issuer: ca, issuerKey: caKey, extensions: [
                (NID_basic_constraints, "critical,CA:FALSE"),
                (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "clientAuth"),
                (NID_authority_key_identifier, "keyid:always"),
            ])
            defer { X509_free(certificate) }
            // Subject UID, Apple's extensions and validity are set after the fact; then signed again.
            if let userID = request.userID {
                guard X509_NAME_add_entry_by_NID(X509_get_subject_name(certificate), NID_userId, MBSTRING_UTF8, userID, -1, 0, 0) == 1 else {
                    throw failure("subject UID")
                }
            }
            for (oid, der) in request.extensions {
                guard let object = OBJ_txt2obj(oid, 1) else { throw failure("OID \(oid)") }
                defer { ASN1_OBJECT_free(object) }
                guard let value = ASN1_OCTET_STRING_new() else { throw failure("ASN1_OCTET_STRING_new") }
                defer { ASN1_OCTET_STRING_free(value) }
                guard ASN1_OCTET_STRING_set(value, der, Int32(der.count)) == 1,
                      let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, value) else { throw failure("extension \(oid)") }
                defer { X509_EXTENSION_free(ext) }
                guard X509_add_ext(certificate, ext, -1) == 1 else { throw failure("X509_add_ext") }
            }
            if request.notAfterOffset < 3600 {
                guard X509_gmtime_adj(X509_getm_notBefore(certificate), request.notAfterOffset - 86400) != nil else { throw failure("validity") }
            }
            guard X509_gmtime_adj(X509_getm_notAfter(certificate), request.notAfterOffset) != nil,
                  X509_sign(certificate, caKey, EVP_sha256()) > 0 else { throw failure("re-signing") }
            let entry = ClientCertificateFiles(
                certificate: "\(directory)/\(request.name).pem", privateKey: "\(directory)/\(request.name)-key.pem",
                pkcs12: "\(directory)/\(request.name).p12")
            try write(try pem { PEM_write_bio_X509($0, certificate) }, to: entry.certificate, mode: 0o644)
            try write(try pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }, to: entry.privateKey, mode: 0o600)
            guard let p12 = PKCS12_create(pkcs12Password, request.name, key, certificate, nil, 0, 0, 0, 0, 0) else {
                throw failure("PKCS12_create")
            }
            defer { PKCS12_free(p12) }
            let length = i2d_PKCS12(p12, nil)
            guard length > 0 else { throw failure("i2d_PKCS12") }
            var der = [UInt8](repeating: 0, count: Int(length))
            _ = der.withUnsafeMutableBufferPointer { buffer in
                var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
                return i2d_PKCS12(p12, &cursor)
            }
            try write(der, to: entry.pkcs12, mode: 0o600)
            files[request.name] = entry
        }
        return (caPath, files)
    }
}
