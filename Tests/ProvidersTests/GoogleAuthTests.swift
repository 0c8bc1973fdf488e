import Foundation
import Synchronization
import Testing
import DeliveryCore
import PushCrypto
@testable import Providers

/// One RSA key for the whole suite (generation is the slow part).
private let rsaKey = try! RSAPrivateKey.generate()

private func serviceAccountJSON(dropping: String? = nil, replacing: [String: JSONValue] = [:]) -> [UInt8] {
    var object: [String: JSONValue] = [
        "type": "service_account", "project_id": "pushizo-demo", "private_key_id": "abc123",
        "private_key": .string(rsaKey.pkcs8PEM), "client_email": "fcm@pushizo-demo.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token", "client_id": "1",
    ]
    if let dropping { object[dropping] = nil }
    for (key, value) in replacing { object[key] = value }
    return JSONValue.object(object).serialized()
}

/// A counter shared with `@Sendable` closures (an `Atomic` cannot be captured by them directly).
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    /// Adds one and returns the new value.
    func next() -> Int { value.add(1, ordering: .relaxed).newValue }
    var count: Int { value.load(ordering: .relaxed) }
}

@Suite struct GoogleServiceAccountTests {
    @Test func parsesAndSignsAVerifiableAssertion() throws {
        let account = try GoogleServiceAccount(json: serviceAccountJSON())
        #expect(account.projectID == "pushizo-demo")
        #expect(account.clientEmail == "fcm@pushizo-demo.iam.gserviceaccount.com")
        #expect(account.tokenURI == "https://oauth2.googleapis.com/token")
        #expect(!"\(account)".contains("PRIVATE"))
        let assertion = try account.assertion(issuedAt: Date(timeIntervalSince1970: 1_700_000_000.6))
        let decoded = try JSONWebToken.decode(assertion)
        #expect(String(decoding: decoded.header, as: UTF8.self) == #"{"alg":"RS256","kid":"abc123","typ":"JWT"}"#)
        #expect(String(decoding: decoded.claims, as: UTF8.self) == #"{"aud":"https://oauth2.googleapis.com/token","exp":1700003600,"iat":1700000000,"iss":"fcm@pushizo-demo.iam.gserviceaccount.com","scope":"https://www.googleapis.com/auth/firebase.messaging"}"#)
        #expect(rsaKey.publicKey.verifyRS256(signature: decoded.signature, for: decoded.signingInput))
        #expect(!(try RSAPrivateKey.generate()).publicKey.verifyRS256(signature: decoded.signature, for: decoded.signingInput))
    }

    @Test(arguments: ["project_id", "client_email", "private_key", "token_uri"])
    func missingKeyIsNamed(_ key: String) {
        let error = #expect(throws: GoogleAuthError.self) { try GoogleServiceAccount(json: serviceAccountJSON(dropping: key)) }
        #expect(error?.code == .invalidServiceAccount)
        #expect(error?.message.contains("\"\(key)\"") == true)
    }

    @Test func badValuesAreNamedWithoutTheKeyText() {
        let brokenPEM = "-----BEGIN PRIVATE KEY-----\nSECRETSECRETSECRET\n-----END PRIVATE KEY-----\n"
        let cases: [([String: JSONValue], String)] = [
            (["private_key": .string(brokenPEM)], "private_key"),
            (["private_key": .string((try? P256PrivateKey.generate().pkcs8PEM) ?? "")], "private_key"),
            (["token_uri": "http://oauth2.googleapis.com/token"], "token_uri"),
            (["project_id": "Bad/Project"], "project_id"),
            (["client_email": 5], "client_email"),
            (["type": "authorized_user"], "type"),
        ]
        for (replacement, key) in cases {
            let error = #expect(throws: GoogleAuthError.self) { try GoogleServiceAccount(json: serviceAccountJSON(replacing: replacement)) }
            #expect(error?.message.contains("\"\(key)\"") == true)
            #expect(error?.message.contains("SECRET") == false)
            #expect(error?.message.contains("BEGIN") == false)
        }
        #expect(throws: GoogleAuthError.self) { try GoogleServiceAccount(json: Array("[1]".utf8)) }
        #expect(throws: GoogleAuthError.self) { try GoogleServiceAccount(json: Array(String(repeating: "[", count: 100_000).utf8)) }
    }

    @Test func tokenRequestAndResponse() throws {
        #expect(String(decoding: GoogleServiceAccount.tokenRequestBody(assertion: "a.b.c"), as: UTF8.self)
            == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c")
        let parsed = try GoogleServiceAccount.parseTokenResponse(Array(#"{"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"}"#.utf8))
        #expect(parsed.accessToken == "ya29.x")
        #expect(parsed.expiresIn == 3599)
        for body in [#"{"expires_in":3599}"#, #"{"access_token":"a b","expires_in":1}"#, #"{"access_token":"x","expires_in":0}"#,
                     #"{"access_token":"x","expires_in":"3599"}"#, #"{"access_token":"x","expires_in":1,"token_type":"mac"}"#, "nope"] {
            let error = #expect(throws: GoogleAuthError.self) { try GoogleServiceAccount.parseTokenResponse(Array(body.utf8)) }
            #expect(error?.code == .invalidTokenResponse)
        }
    }
}
