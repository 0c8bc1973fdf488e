import DeliveryCore
import Foundation
import Testing
@testable import Worker

/// `preview` of a `huawei` subscription: the Push Kit request the worker's plan builds, before OAuth 2.0
/// authorization, with nothing of the client secret in it.
@Suite("preview of Huawei Push Kit requests")
struct HuaweiPreviewTests {
    static let secret = "e7b1c0d9f8a7b6c5+secret/="

    static func input(channel: JSONValue, endpoint: String? = nil) -> JSONValue {
        var channelMembers = channel.objectValue ?? [:]
        if let endpoint { channelMembers["endpoint"] = .string(endpoint) }
        return [
            "at": "2026-12-07T21:30:00Z",
            "app": [
                "default_language": "en", "signing_key": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                "channels": ["huawei": .object(channelMembers)],
            ],
            "user": ["tags": ["first_name": "Işıl"]],
            "subscription": [
                "id": "6f1c6e0e-5a0b-4d6e-9d5e-6b6a1c2d3e4f", "platform": "huawei", "language": "tr",
                "token": "IQAAAACy0kYkAABpZ-huawei-token",
            ],
            "notification": [
                "id": "0b7c1b2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
                "message": ["headings": ["tr": "Merhaba {{ first_name }}"], "contents": ["tr": "Siparişin yolda"]],
            ],
        ]
    }

    @Test func showsThePushKitRequestWithTheSecretLeftOut() throws {
        let output = try Preview.run(Self.input(channel: [
            "app_id": "10086123", "client_secret": .string(Self.secret), "token_uri": "https://oauth-login.cloud.huawei.com/oauth2/v3/token",
        ]))
        #expect(output["decision"] == ["action": "send", "provider": "huawei"])
        let request = try #require(output["request"])
        #expect(request["method"] == "POST")
        #expect(request["origin"] == "https://push-api.cloud.huawei.com")
        #expect(request["path"] == "/v1/10086123/messages:send")
        #expect(request["headers"]?.arrayValue == [
            ["name": "authorization", "value": "Bearer <provider-token>"],
            ["name": "content-type", "value": "application/json; charset=UTF-8"],
        ])
        #expect(request["body"]?["message"]?["android"]?["notification"]?["title"] == "Merhaba Işıl")
        #expect(request["body"]?["message"]?["token"] == ["IQAAAACy0kYkAABpZ-huawei-token"])
        #expect(request["body"]?["validate_only"] == false)
        let notes = output["notes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(notes.contains { $0.hasPrefix("the huawei request is shown before OAuth 2.0 authorization") })
        #expect(!output.jsonText.contains("secret/="))
        #expect(!output.jsonText.contains("e7b1c0d9"))
    }

    @Test func theChannelEndpointAndSettingsAreCheckedAsTheWorkerChecksThem() throws {
        let overridden = try Preview.run(
            Self.input(channel: ["app_id": "10086123"], endpoint: "https://push-proxy.example"))
        #expect(overridden["request"]?["origin"] == "https://push-proxy.example")
        let missing = try Preview.run(Self.input(channel: ["client_secret": .string(Self.secret)]))
        #expect(missing["decision"]?["action"] == "defer")
        #expect(missing["decision"]?["reason"] == "invalid_channel_settings")
        #expect(missing["decision"]?["detail"]?["error"] == "app.channels.huawei.app_id is missing")
        let letters = try Preview.run(Self.input(channel: ["app_id": "app-one"]))
        #expect(letters["decision"]?["reason"] == "invalid_app_id")
        let plainToken = try Preview.run(Self.input(channel: ["app_id": "10086123", "token_uri": "http://oauth.example/token"]))
        #expect(plainToken["decision"]?["reason"] == "invalid_channel_settings")
    }

    @Test func theDatabaseDocumentKeepsTheAppIDAndNeverTheSecret() {
        let kept = PreviewStore.publicSettings(
            ["app_id": "10086123", "client_id": "20086123", "client_secret": .string(Self.secret)], provider: "huawei")
        #expect(kept == ["app_id": "10086123", "client_id": "20086123"])
    }
}
