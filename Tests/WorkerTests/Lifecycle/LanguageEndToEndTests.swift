import Foundation
import Postgres
import Testing
@testable import Worker

/// Language matching through the real `pushizo-worker run` process, PostgreSQL and the APNs emulator: a
/// macrolanguage and its individual language are one language (Norwegian `no` and Bokmål `nb`, CLDR's
/// language matching), and a key of the subscriber's own language still wins over its macrolanguage
/// (docs/localization.md).
@Suite("Language matching end to end", .serialized)
struct LanguageEndToEndTests {
    @Test func norwegianMacrolanguageAndBokmalServeEachOther() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let tokens = try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en", channelSettings: emulator.channelSettings, endpoint: emulator.endpoint)
                    let bokmal = Seed.token(), norwegian = Seed.token()
                    try seed.subscription(token: bokmal, language: "nb-NO")
                    try seed.subscription(token: norwegian, language: "no")
                    for contents in [
                        #"{"en": "Hello 1", "no": "Hei 1 (no)"}"#,
                        #"{"en": "Hello 2", "nb": "Hei 2 (nb)"}"#,
                        #"{"en": "Hello 3", "no": "Hei 3 (no)", "nb": "Hei 3 (nb)"}"#,
                    ] {
                        _ = try seed.notification(message: #"{"contents": \#(contents)}"#, target: #"{"all": true}"#)
                    }
                    return (bokmal: bokmal, norwegian: norwegian)
                }

                let process = try await emulator.runWorkerUntilDrained(databaseURL: url)
                #expect(process.terminationStatus == 0)

                var received: Set<String> = []
                for accepted in emulator.apns.acceptedNotifications {
                    let payload = try #require(try JSONSerialization.jsonObject(with: Data(accepted.payload)) as? [String: Any])
                    let aps = try #require(payload["aps"] as? [String: Any])
                    let body = (aps["alert"] as? [String: Any])?["body"] as? String ?? aps["alert"] as? String ?? "?"
                    let who = accepted.deviceToken == tokens.bokmal ? "nb-NO" : accepted.deviceToken == tokens.norwegian ? "no" : "?"
                    received.insert("\(who): \(body)")
                }
                #expect(received.sorted() == [
                    "nb-NO: Hei 1 (no)", "nb-NO: Hei 2 (nb)", "nb-NO: Hei 3 (nb)",
                    "no: Hei 1 (no)", "no: Hei 2 (nb)", "no: Hei 3 (no)",
                ])
            }
        }
    }
}
