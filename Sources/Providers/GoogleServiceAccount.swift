import DeliveryCore
import Foundation
import PushCrypto

/// Why Google service-account credentials or a token answer were refused.
public struct GoogleAuthError: Error, CustomStringConvertible, Sendable, Equatable {
    /// An extensible error code (new codes may be added; switch with a `default`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The service-account JSON is malformed or misses a key (the message names the key).
        public static let invalidServiceAccount = Code("invalid_service_account")
        /// The assertion could not be signed.
        public static let signingFailed = Code("signing_failed")
        /// The token endpoint's answer is not a usable `{"access_token", "expires_in"}`.
        public static let invalidTokenResponse = Code("invalid_token_response")
        public var description: String { name }
    }

    public var code: Code
    /// Human-readable; names JSON keys, never a private key, assertion or access token.
    public var message: String

    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "GoogleAuthError(\(code)): \(message)" }
}

/// A Google service account as downloaded from the Firebase console (the app's `fcm` channel settings):
/// `{"type": "service_account", "project_id", "private_key_id"?, "private_key", "client_email", "token_uri", ...}`.
/// Used for the OAuth2 JWT-bearer grant (RFC 7523; Google: "Using OAuth 2.0 for Server to Server
/// Applications") that gives FCM HTTP v1 access tokens.
public struct GoogleServiceAccount: Sendable, CustomStringConvertible {
    /// The OAuth2 scope FCM HTTP v1 needs (Firebase: "Authorize send requests").
    public static let firebaseMessagingScope = "https://www.googleapis.com/auth/firebase.messaging"
    /// The assertion's lifetime, in seconds: Google accepts at most one hour.
    public static let assertionLifetime: Int64 = 3600
    /// The largest service-account JSON read, in bytes (real ones are about 2.3 KB).
    public static let maximumJSONSize = 65_536

    public let projectID: String
    public let clientEmail: String
    /// The `private_key_id`, sent as the assertion's `kid` when present.
    public let privateKeyID: String?
    /// Where assertions are exchanged for access tokens (`https://oauth2.googleapis.com/token`).
    public let tokenURI: String
    let privateKey: RSAPrivateKey

    /// Parses and checks the JSON.
    /// - Throws: `GoogleAuthError` `.invalidServiceAccount` naming the missing or bad key (`project_id`,
    ///   `client_email`, `private_key`, `token_uri`, `type`); a bad `private_key` is reported without its text.
    public init(json: [UInt8]) throws(GoogleAuthError) {
        func invalid(_ why: String) -> GoogleAuthError {
            GoogleAuthError(code: .invalidServiceAccount, message: "the service-account JSON \(why)")
        }
        guard json.count <= Self.maximumJSONSize else { throw invalid("is larger than \(Self.maximumJSONSize) bytes") }
        guard APNsResponseClassifier.nestingDepth(json) <= 8, let object = (try? JSONValue(parsing: json))?.objectValue else {
            throw invalid("is not a JSON object")
        }
        func string(_ key: String) throws(GoogleAuthError) -> String {
            guard let value = object[key] else { throw invalid("has no \"\(key)\"") }
            guard let text = value.stringValue, !text.isEmpty else { throw invalid("has a \"\(key)\" that is not a non-empty string") }
            return text
        }
        if let type = object["type"], type.stringValue != "service_account" {
            throw invalid("has a \"type\" other than \"service_account\"")
        }
        let projectID = try string("project_id")
        // Project IDs are 6-30 of [a-z0-9-] (older ones may carry a `domain:` prefix); it goes into a URL path.
        guard projectID.utf8.count <= 100,
              projectID.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == 45 || $0 == 46 || $0 == 58 })
        else { throw invalid("has a \"project_id\" that is not [a-z0-9-.:]") }
        let clientEmail = try string("client_email")
        guard clientEmail.utf8.count <= 320, HTTPFieldValue.isVisibleASCII(clientEmail), clientEmail.contains("@") else {
            throw invalid("has a \"client_email\" that is not an email address")
        }
        let tokenURI = try string("token_uri")
        guard tokenURI.utf8.count <= 2048, let url = URLComponents(string: tokenURI), url.scheme == "https",
              let host = url.host, !host.isEmpty, HTTPFieldValue.isVisibleASCII(tokenURI)
        else { throw invalid("has a \"token_uri\" that is not an https URL") }
        let pem = try string("private_key")
        let key: RSAPrivateKey
        do {
            key = try RSAPrivateKey(pem: pem)
        } catch let error as CryptoError {
            // CryptoError messages never contain key text; they say what was wrong with it.
            throw invalid("has a \"private_key\" that is not a usable RSA PKCS#8 PEM key (\(error.message))")
        } catch {
            throw invalid("has an unreadable \"private_key\"")
        }
        let keyID = object["private_key_id"]?.stringValue.flatMap { $0.utf8.count <= 128 && HTTPFieldValue.isVisibleASCII($0) ? $0 : nil }
        self.init(projectID: projectID, clientEmail: clientEmail, privateKeyID: keyID, tokenURI: tokenURI, privateKey: key)
    }

    /// Builds an account from parts (tests and the emulator's demo accounts). No validation.
    public init(projectID: String, clientEmail: String, privateKeyID: String? = nil, tokenURI: String, privateKey: RSAPrivateKey) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    /// The signed JWT-bearer assertion (RFC 7523 §3): header `{"alg":"RS256","kid"?: private_key_id,
    /// "typ":"JWT"}`, claims `{"aud": token_uri, "exp": iat + 3600, "iat": <whole UNIX seconds>,
    /// "iss": client_email, "scope": firebase.messaging}`.
    /// - Throws: `GoogleAuthError` `.signingFailed`.
    public func assertion(issuedAt: Date) throws(GoogleAuthError) -> String {
        let iat = APNsTokenManager.wholeSeconds(issuedAt.timeIntervalSince1970)
        var header: [String: JWTValue] = ["typ": "JWT"]
        if let privateKeyID { header["kid"] = .string(privateKeyID) }
        let claims: [String: JWTValue] = [
            "iss": .string(clientEmail), "scope": .string(Self.firebaseMessagingScope), "aud": .string(tokenURI),
            "iat": .int(iat), "exp": .int(iat.addingReportingOverflow(Self.assertionLifetime).overflow ? .max : iat + Self.assertionLifetime),
        ]
        do {
            return try JSONWebToken.signRS256(header: header, claims: claims, key: privateKey)
        } catch {
            throw GoogleAuthError(code: .signingFailed, message: "could not sign the service-account assertion: \(error)")
        }
    }

    /// The form body of the token request (`POST token_uri`, `content-type:
    /// application/x-www-form-urlencoded`; RFC 7523 §2.1):
    /// `grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=<jwt>` (a JWT is
    /// base64url and dots, which need no escaping).
    public static func tokenRequestBody(assertion: String) -> [UInt8] {
        Array("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)".utf8)
    }

    /// Reads a token endpoint answer `{"access_token": "...", "expires_in": <seconds>, "token_type": "Bearer"}`.
    /// - Returns: the token and its lifetime in seconds.
    /// - Throws: `GoogleAuthError` `.invalidTokenResponse` for a body over 64 KiB, not JSON, without a
    ///   visible-ASCII `access_token` of at most 4096 characters, or without a positive whole `expires_in`.
    public static func parseTokenResponse(_ body: [UInt8]) throws(GoogleAuthError) -> (accessToken: String, expiresIn: Int) {
        func invalid(_ why: String) -> GoogleAuthError {
            GoogleAuthError(code: .invalidTokenResponse, message: "the token endpoint's answer \(why)")
        }
        guard body.count <= 65_536, APNsResponseClassifier.nestingDepth(body) <= 8,
              let object = (try? JSONValue(parsing: body))?.objectValue
        else { throw invalid("is not a JSON object") }
        guard let token = object["access_token"]?.stringValue, token.utf8.count <= 4096, HTTPFieldValue.isVisibleASCII(token) else {
            throw invalid("has no usable \"access_token\"")
        }
        guard let expiresIn = object["expires_in"]?.int64Value, expiresIn > 0, expiresIn <= 86_400 * 366 else {
            throw invalid("has no positive whole \"expires_in\"")
        }
        if let type = object["token_type"]?.stringValue, type.lowercased() != "bearer" {
            throw invalid("has a \"token_type\" other than Bearer")
        }
        return (token, Int(expiresIn))
    }

    public var description: String { "GoogleServiceAccount(\(clientEmail), project \(projectID))" }
}
