import DeliveryCore
import Foundation
import Testing
@testable import Providers

/// A `huawei` channel's client credentials and Huawei's token endpoint answers.
@Suite struct HuaweiClientCredentialsTests {
    @Test func settingsDefaultTheClientIDAndTokenURI() throws {
        let credentials = try HuaweiClientCredentials(settings: ["app_id": "10086123", "client_secret": "a+b=c/d"])
        #expect(credentials.clientID == "10086123")
        #expect(credentials.tokenURI == "https://oauth-login.cloud.huawei.com/oauth2/v3/token")
        #expect(String(decoding: credentials.tokenRequestBody(), as: UTF8.self)
            == "grant_type=client_credentials&client_id=10086123&client_secret=a%2Bb%3Dc%2Fd")
        #expect(!credentials.description.contains("a+b"), "the secret is never shown")
    }

    @Test func badSettingsNameTheKeyNeverTheSecret() {
        let cases: [(JSONValue, String)] = [
            (["client_secret": "s"], "app_id"),
            (["app_id": "10086/x", "client_secret": "s"], "app_id"),
            (["app_id": "1", "client_id": "abc", "client_secret": "s"], "client_id"),
            (["app_id": "1"], "client_secret"),
            (["app_id": "1", "client_secret": "se cret"], "client_secret"),
            (["app_id": "1", "client_secret": "s", "token_uri": "http://oauth.example/token"], "token_uri"),
        ]
        for (settings, key) in cases {
            #expect(throws: ProviderConfigurationError.self) { try HuaweiClientCredentials(settings: settings) }
            do {
                _ = try HuaweiClientCredentials(settings: settings)
            } catch {
                #expect(error.key == key)
                #expect(!error.description.contains("se cret"))
            }
        }
    }

    @Test func tokenAnswers() {
        #expect(HuaweiClientCredentials.tokenAnswer(
            status: 200, body: Array(#"{"access_token":"CgB6e3x9","expires_in":3600,"token_type":"Bearer"}"#.utf8))
            == .token(accessToken: "CgB6e3x9", expiresIn: 3600))
        #expect(HuaweiClientCredentials.tokenAnswer(
            status: 200, body: Array(#"{"access_token":"CgB6e3x9","expires_in":"3600","token_type":"Bearer"}"#.utf8))
            == .token(accessToken: "CgB6e3x9", expiresIn: 3600))
        #expect(HuaweiClientCredentials.tokenAnswer(
            status: 400, body: Array(#"{"sub_error":12304,"error_description":"client secret invalid","error":1101}"#.utf8))
            == .refused(detail: ["status": 400, "error": 1101, "sub_error": 12304]))
        #expect(HuaweiClientCredentials.tokenAnswer(status: 503, body: []) == .unavailable(detail: ["status": 503]))
        #expect(HuaweiClientCredentials.tokenAnswer(status: 400, body: Array("<html>".utf8)) == .unavailable(detail: ["status": 400]))
        #expect(HuaweiClientCredentials.tokenAnswer(status: 200, body: Array(#"{"access_token":"x y","expires_in":3600}"#.utf8))
            == .unavailable(detail: ["status": 200]))
    }
}
