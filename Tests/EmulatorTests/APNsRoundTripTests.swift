// The round trip Providers -> Emulator: a request built by APNsRequestFactory with a token from
// APNsTokenManager must be accepted by APNsEmulator. EmulatorTests depends on Providers only when
// Package.swift lists "Providers" and "DeliveryCore" for this test target; until then this file compiles
// to nothing.
#if canImport(Providers) && canImport(DeliveryCore)
import DeliveryCore
import Foundation
import PushCrypto
import Providers
import Testing
@testable import Emulator

@Suite struct APNsRoundTripTests {
    @Test func emulatorAcceptsWhatTheFactoryBuilds() throws {
        let key = try P256PrivateKey.generate()
        let now = Date()
        let manager = APNsTokenManager(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", privateKey: key, now: { now })
        let emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)], now: { now })
        for (token, message, expected) in [
            ("aa" + String(repeating: "01", count: 31), ["contents": ["en": "Hi ünïcødé 👋"], "ios_sound": "default"] as JSONValue, 200),
            ("bb" + String(repeating: "02", count: 31), ["content_available": true, "data": ["k": "v"]] as JSONValue, 200),
            ("0410" + String(repeating: "0", count: 60), ["contents": ["en": "x"]] as JSONValue, 410),
        ] {
            let delivery = APNsDelivery(deviceToken: token, topic: "com.example.app", apnsID: UUID(),
                                        message: try NotificationMessage(json: message), msgID: "m", now: now)
            let request = try APNsRequestFactory.makeRequest(delivery, bearerToken: try manager.bearerToken())
            let response = emulator.handle(EmulatorRequest(method: request.method, path: request.path,
                                                           headers: request.headers.map { EmulatorHeader($0.name, $0.value) }, body: request.body))
            #expect(response.status == expected)
            let outcome = APNsResponseClassifier.classify(PushResponse(status: response.status, headers: response.headers.map { PushHeader($0.name, $0.value) }, body: response.body),
                                                          subscriptionTokenUpdatedAt: nil)
            if expected == 200 {
                #expect(outcome == .sent(providerMessageID: delivery.apnsID.uuidString.lowercased()))
            } else {
                #expect(outcome.eventName == "failed")
            }
        }
        #expect(emulator.acceptedCount == 2)
    }
}
#endif
