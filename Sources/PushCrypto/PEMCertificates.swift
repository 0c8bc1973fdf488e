internal import COpenSSL

/// Checks a PEM bundle of X.509 certificates (what `PUSHIZO_CA_FILE` names) the way OpenSSL's trust-store
/// loader will read it, so a bad file is refused at start-up rather than failing every TLS handshake later.
public enum PEMCertificates {
    /// The largest bundle read, in bytes (16 MiB: system bundles are a few hundred KiB).
    public static let maximumBundleSize = 16 << 20

    /// Parses every `CERTIFICATE` (or OpenSSL `TRUSTED CERTIFICATE`) block of `pem` (RFC 7468 §5 textual
    /// encoding) as an X.509 certificate.
    /// - Returns: the number of certificates, at least 1.
    /// - Throws: ``CryptoError`` (`invalidEncoding`) when the text is larger than ``maximumBundleSize``, holds
    ///   no certificate block, or a block does not decode (bad base64, not DER X.509). Never contains the
    ///   file's text.
    public static func count(in pem: [UInt8]) throws(CryptoError) -> Int {
        guard pem.count <= maximumBundleSize else {
            throw CryptoError(code: .invalidEncoding, message: "the PEM bundle is \(pem.count) bytes; at most \(maximumBundleSize) are read")
        }
        let text = String(decoding: pem, as: UTF8.self)
        // Every block OpenSSL's loader would take as a certificate must parse; counted by their BEGIN lines.
        let blocks = text.components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1
            + text.components(separatedBy: "-----BEGIN TRUSTED CERTIFICATE-----").count - 1
        guard blocks > 0 else {
            throw CryptoError(code: .invalidEncoding, message: "no PEM certificate block (-----BEGIN CERTIFICATE-----) found")
        }
        let parsed: Int = pem.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return 0 }
            defer { BIO_free(bio) }
            var count = 0
            // PEM_read_bio_X509_AUX reads both labels; it stops at the end of the text or at a block it cannot
            // decode.
            while let certificate = PEM_read_bio_X509_AUX(bio, nil, nil, nil) {
                X509_free(certificate)
                count += 1
            }
            ERR_clear_error()
            return count
        }
        guard parsed == blocks else {
            throw CryptoError(
                code: .invalidEncoding,
                message: "certificate \(parsed + 1) of \(blocks) in the PEM bundle is not a valid X.509 certificate")
        }
        return parsed
    }
}
