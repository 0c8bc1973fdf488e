import DeliveryCore
import Foundation

/// A `huawei` channel's settings: the app's OAuth 2.0 client credentials from AppGallery Connect, `{"app_id":
/// "<digits>", "client_secret": "<secret>", "client_id"?: "<digits>", "token_uri"?: "<https URL>"}`.
///
/// Push Kit's v1 send API takes an app-level access token of the client-credentials grant (Huawei, "Open
/// Platform Authentication - Client Password Mode"; RFC 6749 §4.4): `POST token_uri` with
/// `grant_type=client_credentials&client_id=<id>&client_secret=<secret>` as
/// `application/x-www-form-urlencoded`, answered `{"access_token", "expires_in": 3600, "token_type":
/// "Bearer"}`. `client_id` is the App ID unless the settings name another (an OAuth 2.0 client of the app).
public struct HuaweiClientCredentials: Sendable, CustomStringConvertible {
    /// Huawei's token endpoint (Huawei, "Client Credentials": `https://oauth-login.cloud.huawei.com/oauth2/v3/token`).
    public static let defaultTokenURI = "https://oauth-login.cloud.huawei.com/oauth2/v3/token"
    /// The longest `client_secret` read, in bytes (AppGallery Connect's are 64 hexadecimal characters).
    public static let maximumSecretLength = 1024

    /// The App ID, the `[appid]` of the send path: 1 to 64 ASCII digits.
    public let appID: String
    /// The OAuth 2.0 client ID: 1 to 64 ASCII digits (Huawei's token endpoint refuses any other with
    /// `sub_error` 20002).
    public let clientID: String
    /// Where the access token is fetched.
    public let tokenURI: String
    let clientSecret: String

    /// Parses and checks the settings.
    /// - Throws: ``ProviderConfigurationError`` naming the missing or bad key (`app_id`, `client_id`,
    ///   `client_secret`, `token_uri`); the secret is never echoed.
    public init(settings: JSONValue) throws(ProviderConfigurationError) {
        func digits(_ key: String, _ value: String?) throws(ProviderConfigurationError) -> String {
            guard let value else { throw ProviderConfigurationError(code: .missingKey, key: key, message: "is missing") }
            guard (1...64).contains(value.utf8.count), value.utf8.allSatisfy({ (48...57).contains($0) }) else {
                throw ProviderConfigurationError(code: .invalidValue, key: key, message: "must be 1 to 64 ASCII digits")
            }
            return value
        }
        appID = try digits("app_id", settings["app_id"]?.stringValue)
        clientID = try digits("client_id", settings["client_id"]?.stringValue ?? appID)
        guard let secret = settings["client_secret"]?.stringValue else {
            throw ProviderConfigurationError(code: .missingKey, key: "client_secret", message: "is missing")
        }
        guard (1...Self.maximumSecretLength).contains(secret.utf8.count), HTTPFieldValue.isVisibleASCII(secret) else {
            throw ProviderConfigurationError(code: .invalidValue, key: "client_secret",
                                             message: "must be 1 to \(Self.maximumSecretLength) visible ASCII characters")
        }
        clientSecret = secret
        let uri = settings["token_uri"]?.stringValue ?? Self.defaultTokenURI
        guard let url = URL(string: uri), url.scheme == "https", url.host != nil else {
            throw ProviderConfigurationError(code: .invalidValue, key: "token_uri", message: "must be an https URL")
        }
        tokenURI = uri
    }

    /// The form body of the token request: `grant_type=client_credentials&client_id=<id>&client_secret=<secret>`,
    /// the secret percent-encoded as `application/x-www-form-urlencoded` needs (everything but ASCII letters,
    /// digits and `*-._` as `%XX`; a `+` or `=` in a secret would otherwise change it).
    public func tokenRequestBody() -> [UInt8] {
        var body = Array("grant_type=client_credentials&client_id=\(clientID)&client_secret=".utf8)
        for byte in clientSecret.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"):
                body.append(byte)
            default:
                body += Array("%".utf8) + Array(String(byte, radix: 16, uppercase: true).leftPadded(to: 2).utf8)
            }
        }
        return body
    }

    /// What the token endpoint's answer means.
    public enum TokenAnswer: Sendable, Equatable {
        /// A token and its lifetime in seconds.
        case token(accessToken: String, expiresIn: Int)
        /// The endpoint refused these credentials (HTTP 400 or 401 with an `error` code, e.g. 1101 with
        /// `sub_error` 12304 "client_secret incorrect" or 20003 "client_id does not exist"): the channel's fault,
        /// `access_token_failed`. `detail` is `{"status", "error"?, "sub_error"?}` (never the description,
        /// which may repeat what was sent).
        case refused(detail: JSONValue)
        /// The endpoint failed for now (500, 502, 503 rate limiting, 504, 590; 403, which Huawei explains as the
        /// caller's network policy; or an answer that is not a token):
        /// keep the old token while it lasts, ask again later.
        case unavailable(detail: JSONValue)
    }

    /// Reads the token endpoint's answer (Huawei, "Account Kit server error codes" for
    /// `oauth-login.cloud.huawei.com/oauth2/v3/token`): 200 with `{"access_token", "expires_in", "token_type"}`
    /// (`expires_in` a whole number, or its digits as a string as older documents show it); 4xx with
    /// `{"error": <int>, "sub_error": <int>, "error_description"}`.
    public static func tokenAnswer(status: Int, body: [UInt8]) -> TokenAnswer {
        var detail: [String: JSONValue] = ["status": .int(Int64(status))]
        let object = body.count <= 65_536 && APNsResponseClassifier.nestingDepth(body) <= 8
            ? (try? JSONValue(parsing: body))?.objectValue : nil
        if status == 200, let object {
            var normalized = object
            if let text = object["expires_in"]?.stringValue, let seconds = Int64(text) { normalized["expires_in"] = .int(seconds) }
            if let parsed = try? GoogleServiceAccount.parseTokenResponse(JSONValue.object(normalized).serialized()) {
                return .token(accessToken: parsed.accessToken, expiresIn: parsed.expiresIn)
            }
        }
        if let error = object?["error"]?.int64Value { detail["error"] = .int(error) }
        if let subError = object?["sub_error"]?.int64Value { detail["sub_error"] = .int(subError) }
        if status == 400 || status == 401, detail["error"] != nil { return .refused(detail: .object(detail)) }
        return .unavailable(detail: .object(detail))
    }

    public var description: String { "HuaweiClientCredentials(app \(appID), client \(clientID))" }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
