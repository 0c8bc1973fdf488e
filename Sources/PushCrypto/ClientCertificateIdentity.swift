internal import COpenSSL
internal import CPushizoOpenSSLShims
import Foundation

/// A TLS client identity (an X.509 certificate, its chain and its private key) read with OpenSSL from what
/// certificate authorities and Apple's developer portal hand out: PEM (RFC 7468; the key PKCS#8, traditional or
/// encrypted with a password) or PKCS#12 (RFC 7292, a `.p12` as Keychain Access exports it, with its password).
///
/// Only values leave OpenSSL: the chain and the key re-encoded as PEM for the TLS layer (the key unencrypted,
/// in memory only), and the leaf's public facts (SHA-256 fingerprint, validity, subject, extensions). The key is
/// checked to match the certificate. `description` never shows the key.
public struct ClientCertificateIdentity: Sendable, CustomStringConvertible {
    /// The leaf certificate first, then any chain certificates, as PEM.
    public let certificateChainPEM: [UInt8]
    /// The private key as unencrypted PKCS#8 PEM. A secret: never log it.
    public let privateKeyPEM: [UInt8]
    /// The leaf certificate's public facts (fingerprint, validity, subject, extensions).
    public let certificate: X509CertificateFacts

    /// The largest PEM or PKCS#12 input read, in bytes (a push certificate with its chain is a few KiB).
    public static let maximumInputSize = 256 * 1024

    /// Reads a PEM identity.
    /// - Parameters:
    ///   - certificatePEM: one or more `CERTIFICATE` blocks, the leaf first; may also hold the key.
    ///   - privateKeyPEM: the key's PEM (`PRIVATE KEY`, `EC PRIVATE KEY`, `RSA PRIVATE KEY` or
    ///     `ENCRYPTED PRIVATE KEY`); nil when `certificatePEM` holds it.
    ///   - password: the key's password when it is encrypted; never prompted for.
    /// - Throws: ``CryptoError`` (`invalidEncoding` for an unreadable certificate, `invalidKey` for a missing,
    ///   unreadable or wrongly-decrypted key or one that does not match the certificate); OpenSSL's reason only,
    ///   never the input.
    public init(certificatePEM: [UInt8], privateKeyPEM: [UInt8]?, password: String?) throws(CryptoError) {
        guard certificatePEM.count <= Self.maximumInputSize, (privateKeyPEM?.count ?? 0) <= Self.maximumInputSize else {
            throw CryptoError(code: .invalidInput, message: "the certificate or key PEM is larger than \(Self.maximumInputSize) bytes")
        }
        ERR_clear_error()
        let certificates = Self.readCertificates(certificatePEM)
        defer { certificates.forEach { X509_free($0) } }
        guard let leaf = certificates.first else {
            _ = drainOpenSSLErrors()
            throw CryptoError(code: .invalidEncoding, message: "no readable PEM certificate (-----BEGIN CERTIFICATE-----) found")
        }
        guard let key = Self.readPrivateKey(privateKeyPEM ?? certificatePEM, password: password) else {
            throw CryptoError.openSSL(
                .invalidKey,
                password == nil
                    ? "cannot read the private key PEM (missing, damaged, or encrypted and no password given)"
                    : "cannot read the private key PEM (missing, damaged, or the password is wrong)")
        }
        defer { EVP_PKEY_free(key) }
        try self.init(leaf: leaf, chain: Array(certificates.dropFirst()), key: key)
    }

    /// Reads a PKCS#12 identity (`d2i_PKCS12`, `PKCS12_parse`): the key, its certificate and any CA
    /// certificates. Keychain Access and older OpenSSL encrypt with RC2 / 3DES (PKCS#12 legacy PBEs), which
    /// OpenSSL 3 keeps in its `legacy` provider: when a first parse fails, the `legacy` and `default` providers
    /// are loaded (once, for the process) and the parse is retried.
    /// - Parameters:
    ///   - pkcs12: the `.p12` file's bytes (DER).
    ///   - password: its import password (`""` for none).
    /// - Throws: ``CryptoError`` (`invalidEncoding` not PKCS#12, `invalidKey` wrong password or no key or
    ///   certificate inside); never the input or the password.
    public init(pkcs12: [UInt8], password: String) throws(CryptoError) {
        guard pkcs12.count <= Self.maximumInputSize else {
            throw CryptoError(code: .invalidInput, message: "the PKCS#12 data is larger than \(Self.maximumInputSize) bytes")
        }
        ERR_clear_error()
        var parsed = Self.parsePKCS12(pkcs12, password: password)
        if case .failure(.unreadable) = parsed {
            _ = drainOpenSSLErrors()
            if Self.legacyProvidersLoaded { parsed = Self.parsePKCS12(pkcs12, password: password) }
        }
        switch parsed {
        case .failure(.notPKCS12):
            throw CryptoError.openSSL(.invalidEncoding, "the data is not a DER PKCS#12 (.p12) file")
        case .failure(.unreadable):
            throw CryptoError.openSSL(.invalidKey, "cannot open the PKCS#12 file (wrong password, or an unsupported encryption)")
        case .failure(.incomplete):
            throw CryptoError(code: .invalidKey, message: "the PKCS#12 file holds no private key with its certificate")
        case .success(let (leaf, chain, key)):
            defer {
                X509_free(leaf)
                chain.forEach { X509_free($0) }
                EVP_PKEY_free(key)
            }
            try self.init(leaf: leaf, chain: chain, key: key)
        }
    }

    private init(leaf: OpaquePointer, chain: [OpaquePointer], key: OpaquePointer) throws(CryptoError) {
        guard X509_check_private_key(leaf, key) == 1 else {
            throw CryptoError.openSSL(.invalidKey, "the private key does not belong to the certificate")
        }
        var chainPEM: [UInt8] = []
        for certificate in [leaf] + chain {
            guard let pem = Self.pem({ PEM_write_bio_X509($0, certificate) }) else {
                throw CryptoError.openSSL(.invalidEncoding, "cannot encode the certificate as PEM")
            }
            chainPEM += pem
        }
        guard let keyPEM = Self.pem({ PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }) else {
            throw CryptoError.openSSL(.invalidKey, "cannot encode the private key")
        }
        certificateChainPEM = chainPEM
        privateKeyPEM = keyPEM
        certificate = try X509CertificateFacts(leaf)
        ERR_clear_error()
    }

    /// The UTF8String, PrintableString or IA5String members at the top level of a DER `SEQUENCE` (decoded by
    /// OpenSSL's `d2i_ASN1_SEQUENCE_ANY`), in order; other members are skipped. Nil when `der` is not a
    /// SEQUENCE. Used for Apple's topics extension (1.2.840.113635.100.6.3.6).
    public static func sequenceStrings(_ der: [UInt8]) -> [String]? {
        der.withUnsafeBufferPointer { buffer -> [String]? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let sequence = d2i_ASN1_SEQUENCE_ANY(nil, &cursor, buffer.count) else {
                ERR_clear_error()
                return nil
            }
            defer { OPENSSL_sk_pop_free(sequence) { ASN1_TYPE_free($0?.assumingMemoryBound(to: ASN1_TYPE.self)) } }
            var strings: [String] = []
            for index in 0..<OPENSSL_sk_num(sequence) {
                guard let raw = OPENSSL_sk_value(sequence, index) else { continue }
                let member = raw.assumingMemoryBound(to: ASN1_TYPE.self)
                let type = ASN1_TYPE_get(member)
                guard type == V_ASN1_UTF8STRING || type == V_ASN1_PRINTABLESTRING || type == V_ASN1_IA5STRING,
                      let string = member.pointee.value.asn1_string else { continue }
                let count = Int(ASN1_STRING_length(string))
                strings.append(String(decoding: UnsafeBufferPointer(start: ASN1_STRING_get0_data(string), count: max(0, count)), as: UTF8.self))
            }
            return strings
        }
    }

    public var description: String {
        "ClientCertificateIdentity(subject: \(certificate.subject), fingerprint: \(certificate.fingerprint), notAfter: \(certificate.notAfter), privateKey: <redacted>)"
    }

    // MARK: - OpenSSL plumbing

    private enum PKCS12Failure: Error { case notPKCS12, unreadable, incomplete }

    private static func parsePKCS12(_ data: [UInt8], password: String)
        -> Result<(OpaquePointer, [OpaquePointer], OpaquePointer), PKCS12Failure>
    {
        data.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let p12 = d2i_PKCS12(nil, &cursor, buffer.count) else { return .failure(.notPKCS12) }
            defer { PKCS12_free(p12) }
            var key: OpaquePointer?
            var certificate: OpaquePointer?
            var authorities: OpaquePointer?
            guard PKCS12_parse(p12, password, &key, &certificate, &authorities) == 1 else { return .failure(.unreadable) }
            var chain: [OpaquePointer] = []
            if let authorities {
                for index in 0..<OPENSSL_sk_num(authorities) {
                    if let raw = OPENSSL_sk_value(authorities, index) { chain.append(OpaquePointer(raw)) }
                }
                // The stack is freed; its certificates now belong to `chain`.
                OPENSSL_sk_free(authorities)
            }
            guard let key, let certificate else {
                if let key { EVP_PKEY_free(key) }
                if let certificate { X509_free(certificate) }
                chain.forEach { X509_free($0) }
                return .failure(.incomplete)
            }
            return .success((certificate, chain, key))
        }
    }

    /// Loads OpenSSL 3's `legacy` provider (RC2, RC4, DES: the PBEs of Keychain's `.p12` exports) with the
    /// `default` one (loading any provider explicitly stops the implicit load of `default`). Once per process.
    private static let legacyProvidersLoaded: Bool = {
        let legacy = OSSL_PROVIDER_load(nil, "legacy")
        let standard = OSSL_PROVIDER_load(nil, "default")
        ERR_clear_error()
        return legacy != nil && standard != nil
    }()

    private static func readCertificates(_ pem: [UInt8]) -> [OpaquePointer] {
        pem.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return [] }
            defer { BIO_free(bio) }
            var list: [OpaquePointer] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { list.append(certificate) }
            ERR_clear_error()  // the loop ends on an expected "no start line"
            return list
        }
    }

    /// `PEM_read_bio_PrivateKey` with a password callback that hands over `password` or refuses: OpenSSL's
    /// default callback would prompt on the terminal.
    private static func readPrivateKey(_ pem: [UInt8], password: String?) -> OpaquePointer? {
        let callback: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = {
            buffer, size, _, context in
            guard let buffer, let context else { return -1 }
            let password = context.assumingMemoryBound(to: CChar.self)
            let length = strlen(password)
            guard length <= Int(size) else { return -1 }
            memcpy(buffer, password, length)
            return Int32(length)
        }
        return pem.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            guard let password else { return PEM_read_bio_PrivateKey(bio, nil, callback, nil) }
            var bytes = Array(password.utf8CString)
            defer { for index in bytes.indices { bytes[index] = 0 } }
            return bytes.withUnsafeMutableBytes { PEM_read_bio_PrivateKey(bio, nil, callback, $0.baseAddress) }
        }
    }

    private static func pem(_ writer: (OpaquePointer) -> Int32) -> [UInt8]? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard writer(bio) == 1 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(BIO_ctrl_pending(bio)))
        guard BIO_read(bio, &bytes, Int32(bytes.count)) == Int32(bytes.count) else { return nil }
        return bytes
    }
}

/// What an X.509 certificate says about itself, read with OpenSSL: public values only.
public struct X509CertificateFacts: Sendable, Hashable {
    /// SHA-256 over the certificate's DER encoding, lower-case hex (64 characters): what a certificate is known
    /// by (connection pools, logs); public.
    public let fingerprint: String
    /// `notBefore` and `notAfter` (RFC 5280 §4.1.2.5).
    public let notBefore: Date
    public let notAfter: Date
    /// The subject in OpenSSL's one-line form (`/UID=.../CN=...`), for messages.
    public let subject: String
    /// The subject's `UID` attribute (OID 0.9.2342.19200300.100.1.1, RFC 4519 §2.39), when present: Apple puts
    /// the app's bundle ID there.
    public let subjectUserID: String?
    /// The extensions by dotted OID, each with its `extnValue` contents (the DER inside the OCTET STRING).
    public let extensions: [String: [UInt8]]

    /// Reads a DER certificate (e.g. the one a TLS peer presented).
    /// - Throws: ``CryptoError`` `invalidEncoding` when it is not DER X.509.
    public init(der: [UInt8]) throws(CryptoError) {
        let certificate: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let certificate else { throw CryptoError.openSSL(.invalidEncoding, "not a DER X.509 certificate") }
        defer { X509_free(certificate) }
        try self.init(certificate)
    }

    init(_ leaf: OpaquePointer) throws(CryptoError) {
        let length = i2d_X509(leaf, nil)
        guard length > 0 else { throw CryptoError.openSSL(.invalidEncoding, "cannot encode the certificate as DER") }
        var der = [UInt8](repeating: 0, count: Int(length))
        _ = der.withUnsafeMutableBufferPointer { buffer in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_X509(leaf, &cursor)
        }
        guard let notBefore = Self.date(X509_get0_notBefore(leaf)), let notAfter = Self.date(X509_get0_notAfter(leaf)) else {
            throw CryptoError.openSSL(.invalidEncoding, "the certificate's validity dates are unreadable")
        }
        fingerprint = SHA256.hash(der).map { String(format: "%02x", $0) }.joined()
        self.notBefore = notBefore
        self.notAfter = notAfter
        let name = X509_get_subject_name(leaf)
        var buffer = [CChar](repeating: 0, count: 512)
        subject = X509_NAME_oneline(name, &buffer, Int32(buffer.count)) != nil
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
        subjectUserID = Self.nameEntry(name, nid: NID_userId)
        var extensions: [String: [UInt8]] = [:]
        for index in 0..<max(0, X509_get_ext_count(leaf)) {
            guard let ext = X509_get_ext(leaf, index), let object = X509_EXTENSION_get_object(ext),
                  let data = X509_EXTENSION_get_data(ext) else { continue }
            var oid = [CChar](repeating: 0, count: 128)
            let written = OBJ_obj2txt(&oid, Int32(oid.count), object, 1)
            guard written > 0, Int(written) < oid.count else { continue }
            let key = String(decoding: oid.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let count = Int(ASN1_STRING_length(data))
            extensions[key] = count > 0 ? Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data(data), count: count)) : []
        }
        self.extensions = extensions
        ERR_clear_error()
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }

    private static func nameEntry(_ name: OpaquePointer?, nid: Int32) -> String? {
        guard let name else { return nil }
        let index = X509_NAME_get_index_by_NID(name, nid, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index), let data = X509_NAME_ENTRY_get_data(entry) else {
            return nil
        }
        var utf8: UnsafeMutablePointer<UInt8>?
        let length = ASN1_STRING_to_UTF8(&utf8, data)
        guard length >= 0, let utf8 else { return nil }
        defer { pz_OPENSSL_free(utf8) }
        return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
    }
}
