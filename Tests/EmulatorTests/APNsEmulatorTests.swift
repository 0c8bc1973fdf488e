import Foundation
import Synchronization
import Testing
import PushCrypto
@testable import Emulator

/// Builds requests the way APNs clients do, from PushCrypto alone (the Providers-built round trip is in
/// APNsRoundTripTests.swift).
struct RequestBuilder {
    let key: P256PrivateKey
    var teamID = "DEF123GHIJ"
    var keyID = "ABC123DEFG"
    var issuedAt: Int64 = 1_700_000_000
    var token = "ab" + String(repeating: "cd", count: 31)
    var headers: [String: String] = [
        "apns-topic": "com.example.app", "apns-push-type": "alert", "apns-priority": "10",
        "apns-id": "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10",
    ]
    var body = Array(#"{"aps":{"alert":{"body":"Hi"},"mutable-content":1},"on":{"msgId":"m"}}"#.utf8)
    var method = "POST"

    func jwt(signingKey: P256PrivateKey? = nil) throws -> String {
        try JSONWebToken.signES256(header: ["kid": .string(keyID)], claims: ["iss": .string(teamID), "iat": .int(issuedAt)], key: signingKey ?? key)
    }

    func request(authorization: String? = nil) throws -> EmulatorRequest {
        var list = [EmulatorHeader("authorization", try authorization ?? "bearer \(jwt())")]
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { list.append(EmulatorHeader(name, value)) }
        return EmulatorRequest(method: method, path: "/3/device/\(token)", authority: "api.push.apple.com", headers: list, body: body)
    }
}

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let current: Mutex<Date>
    init(_ start: Date) { current = Mutex(start) }
    var now: Date { current.withLock { $0 } }
    func advance(_ seconds: Double) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

func reason(_ response: EmulatorResponse) -> String? {
    (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["reason"] as? String
}

@Suite struct APNsEmulatorTests {
    let key: P256PrivateKey
    let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_100))
    let emulator: APNsEmulator
    let builder: RequestBuilder

    init() throws {
        key = try P256PrivateKey.generate()
        let clock = self.clock
        emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                now: { clock.now })
        builder = RequestBuilder(key: key)
    }

    @Test func acceptsAValidRequest() throws {
        let response = emulator.handle(try builder.request())
        #expect(response.status == 200)
        #expect(response.header("apns-id") == "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10")
        #expect(emulator.acceptedCount == 1)
        let accepted = try #require(emulator.acceptedNotifications.first)
        #expect(accepted.deviceToken == builder.token && accepted.topic == "com.example.app" && accepted.pushType == "alert")
        let line = try #require(try JSONSerialization.jsonObject(with: Data(accepted.jsonLine.utf8)) as? [String: Any])
        #expect(line["token"] as? String == builder.token)
        #expect((line["payload"] as? [String: Any])?["aps"] != nil)
        #expect(!accepted.jsonLine.contains("\n"))
    }

    /// The request-log record holds every field with its value (keys sorted, strings escaped), the payload as
    /// JSON, and stays one line when the payload had line breaks between its tokens.
    @Test func theRequestLogRecordIsOneLineOfSortedJSON() throws {
        let received = Date(timeIntervalSince1970: 1_800_000_000.123)
        func record(_ payload: String, collapseID: String? = #"q"u\o"#) -> APNsAcceptedNotification {
            APNsAcceptedNotification(
                receivedAt: received, apnsID: "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10", deviceToken: "ab" + String(repeating: "0", count: 62),
                topic: "com.example.app", pushType: "alert", priority: "10", expiration: nil, collapseID: collapseID,
                payload: Array(payload.utf8))
        }
        let compact = record(#"{"aps":{"alert":{"title":"Hi ş"}},"on":{"msgId":"m"}}"#)
        #expect(compact.jsonLine == #"{"apns_id":"6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10","at":"2027-01-15T08:00:00.123Z","collapse_id":"q\"u\\o","payload":{"aps":{"alert":{"title":"Hi ş"}},"on":{"msgId":"m"}},"priority":"10","push_type":"alert","token":"\#("ab" + String(repeating: "0", count: 62))","topic":"com.example.app"}"#)
        let spread = record("{\n  \"aps\": {\"alert\": \"Hi\"},\r\n  \"on\": {}\n}", collapseID: nil)
        #expect(!spread.jsonLine.contains("\n") && !spread.jsonLine.contains("\r"))
        let line = try #require(try JSONSerialization.jsonObject(with: Data(spread.jsonLine.utf8)) as? [String: Any])
        #expect((line["payload"] as? [String: Any])?["aps"] as? [String: String] == ["alert": "Hi"])
        #expect(line["collapse_id"] == nil && line["expiration"] == nil && line["topic"] as? String == "com.example.app")
    }

    @Test func generatesAnAPNsIDWhenNoneIsGiven() throws {
        var builder = self.builder
        builder.headers["apns-id"] = nil
        let response = emulator.handle(try builder.request())
        #expect(response.status == 200)
        #expect(UUID(uuidString: response.header("apns-id") ?? "") != nil)
    }

    @Test func providerTokenChecks() throws {
        let other = try P256PrivateKey.generate()
        var cases: [(EmulatorRequest, Int, String)] = [
            (try builder.request(authorization: "bearer \(try builder.jwt(signingKey: other))"), 403, "InvalidProviderToken"),
            (try builder.request(authorization: "bearer not.a.jwt"), 403, "InvalidProviderToken"),
            (try builder.request(authorization: "Basic abc"), 403, "InvalidProviderToken"),
            (try builder.request(authorization: ""), 403, "MissingProviderToken"),
        ]
        var unknownKid = builder
        unknownKid.keyID = "ZZZZZZZZZZ"
        cases.append((try unknownKid.request(), 403, "InvalidProviderToken"))
        var wrongTeam = builder
        wrongTeam.teamID = "OTHERTEAM1"
        cases.append((try wrongTeam.request(), 403, "InvalidProviderToken"))
        var old = builder
        old.issuedAt = 1_700_000_100 - 3_601
        cases.append((try old.request(), 403, "ExpiredProviderToken"))
        // A DER signature (the classic bug) instead of R||S is refused.
        let raw = try builder.jwt().split(separator: ".")
        cases.append((try builder.request(authorization: "bearer \(raw[0]).\(raw[1]).MEUCIQDx"), 403, "InvalidProviderToken"))
        for (request, status, expected) in cases {
            let response = emulator.handle(request)
            #expect(response.status == status)
            #expect(reason(response) == expected)
        }
        var noAuth = try builder.request()
        noAuth.headers.removeFirst()
        #expect(reason(emulator.handle(noAuth)) == "MissingProviderToken")
        #expect(emulator.acceptedCount == 0)
        // One hour old exactly is still fine.
        var hourOld = builder
        hourOld.issuedAt = 1_700_000_100 - 3_600
        #expect(emulator.handle(try hourOld.request()).status == 200)
    }

    @Test func aReusedTokenExpiresAfterAnHour() throws {
        let request = try builder.request()
        #expect(emulator.handle(request).status == 200)
        clock.advance(3_500)  // iat + 3,600 s: still valid
        #expect(emulator.handle(request).status == 200)
        clock.advance(1)
        let response = emulator.handle(request)
        #expect(response.status == 403)
        #expect(reason(response) == "ExpiredProviderToken")
    }

    @Test func requestShapeChecks() throws {
        func check(_ mutate: (inout RequestBuilder) -> Void, _ status: Int, _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            var builder = self.builder
            mutate(&builder)
            let response = emulator.handle(try builder.request())
            #expect(response.status == status, sourceLocation: sourceLocation)
            #expect(reason(response) == expected, sourceLocation: sourceLocation)
        }
        try check({ $0.method = "GET" }, 405, "MethodNotAllowed")
        try check({ $0.token = "" }, 400, "MissingDeviceToken")
        try check({ $0.token = "xyz" }, 400, "BadDeviceToken")
        try check({ $0.token = String(repeating: "g", count: 64) }, 400, "BadDeviceToken")
        try check({ $0.token = String(repeating: "a", count: 62) }, 400, "BadDeviceToken")
        try check({ $0.headers["apns-topic"] = nil }, 400, "MissingTopic")
        try check({ $0.headers["apns-push-type"] = "banner" }, 400, "InvalidPushType")
        try check({ $0.headers["apns-push-type"] = nil }, 400, "InvalidPushType")
        try check({ $0.headers["apns-priority"] = "7" }, 400, "BadPriority")
        try check({ $0.headers["apns-push-type"] = "background" }, 400, "BadPriority")
        try check({ $0.headers["apns-id"] = "not-a-uuid" }, 400, "BadMessageId")
        try check({ $0.headers["apns-expiration"] = "tomorrow" }, 400, "BadExpirationDate")
        try check({ $0.headers["apns-collapse-id"] = String(repeating: "c", count: 65) }, 400, "BadCollapseId")
        try check({ $0.body = [UInt8](repeating: 0x20, count: 4_097) }, 413, "PayloadTooLarge")
        try check({ $0.body = [] }, 400, "PayloadEmpty")
        try check({ $0.body = Array(#"{"on":{}}"#.utf8) }, 400, "PayloadEmpty")
        try check({ $0.body = Array("{not json".utf8) }, 400, "BadPayload")
        var wrongPath = try builder.request()
        wrongPath.path = "/4/device/\(builder.token)"
        #expect(reason(emulator.handle(wrongPath)) == "BadPath")
        var duplicate = try builder.request()
        duplicate.headers.append(EmulatorHeader("apns-topic", "com.other"))
        #expect(reason(emulator.handle(duplicate)) == "DuplicateHeaders")
        #expect(emulator.acceptedCount == 0)
    }

    /// The byte-level checks that replaced Foundation's parsers: `apns-id` in canonical UUID text of either case, a
    /// payload that is an RFC 8259 JSON object holding an `aps` object (stricter than `JSONSerialization`, which let
    /// a byte-order mark and trailing commas through), optional whitespace (SP, HTAB) around the bearer token and
    /// nothing else (Foundation also trimmed Unicode spaces), header names in any case.
    @Test func byteLevelChecksAndTheirStricterVerdicts() throws {
        func answer(_ mutate: (inout RequestBuilder) -> Void, authorization: String? = nil) throws -> (Int, String?) {
            var builder = self.builder
            mutate(&builder)
            let response = emulator.handle(try builder.request(authorization: authorization))
            return (response.status, reason(response))
        }
        #expect(try answer({ $0.headers["apns-id"] = "6B1C2C4E-7A61-4F0C-9C2D-0E3D5B8F9A10" }).0 == 200)
        for bad in ["6b1c2c4e7a614f0c9c2d0e3d5b8f9a10", "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a1", "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a1g",
                    "{6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a1}", "6b1c2c4e_7a61-4f0c-9c2d-0e3d5b8f9a10", "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10 "] {
            #expect(try answer({ $0.headers["apns-id"] = bad }) == (400, "BadMessageId"), "\(bad)")
        }
        #expect(try answer({ $0.body = Array(#"[{"aps":{}}]"#.utf8) }) == (400, "BadPayload"))
        #expect(try answer({ $0.body = Array(#""aps""#.utf8) }) == (400, "BadPayload"))
        #expect(try answer({ $0.body = Array(#"{"aps":"alert"}"#.utf8) }) == (400, "PayloadEmpty"))
        #expect(try answer({ $0.body = Array(#"{"aps":{}} x"#.utf8) }) == (400, "BadPayload"))
        #expect(try answer({ $0.body = Array(#" {"aps":{"alert":"é"}} "#.utf8) }).0 == 200)
        #expect(try answer({ $0.body = Array(#"{"aps":{},}"#.utf8) }) == (400, "BadPayload"))
        #expect(try answer({ $0.body = [0xEF, 0xBB, 0xBF] + Array(#"{"aps":{}}"#.utf8) }) == (400, "BadPayload"))
        #expect(try answer({ $0.body = Array(#"{"aps":{},"n":1e400}"#.utf8) }).0 == 200)
        let jwt = try builder.jwt()
        #expect(try answer({ _ in }, authorization: "Bearer \t \(jwt) \t").0 == 200)
        #expect(try answer({ _ in }, authorization: "bearer \(jwt)x") == (403, "InvalidProviderToken"))
        #expect(try answer({ _ in }, authorization: "bearer  \t ") == (403, "InvalidProviderToken"))
        #expect(try answer({ _ in }, authorization: "bearer \u{A0}\(jwt)") == (403, "InvalidProviderToken"))
        var mixedCase = try builder.request()
        mixedCase.headers = mixedCase.headers.map { EmulatorHeader($0.name.uppercased(), $0.value) }
        #expect(emulator.handle(mixedCase).status == 200)
        #expect(mixedCase.header("Apns-Topic") == "com.example.app")
        // A name in another case is the same header: one of each is a duplicate.
        var mixedDuplicate = try builder.request()
        mixedDuplicate.headers.append(EmulatorHeader("APNS-Topic", "com.other"))
        #expect(reason(emulator.handle(mixedDuplicate)) == "DuplicateHeaders")
    }

    /// Apple's pairing of `apns-push-type` and topic ("Sending notification requests to APNs"): each type with
    /// a suffix needs it, and a suffixed topic takes no other type, so an alert can never reach a VoIP token.
    @Test func pushTypeAndTopicPairing() throws {
        func answer(_ pushType: String, _ topic: String, priority: String = "10", bodySize: Int? = nil) throws -> String {
            var builder = self.builder
            builder.headers["apns-push-type"] = pushType
            builder.headers["apns-topic"] = topic
            builder.headers["apns-priority"] = priority
            if let bodySize {
                let filler = String(repeating: "a", count: bodySize - #"{"aps":{},"x":""}"#.utf8.count)
                builder.body = Array(#"{"aps":{},"x":"\#(filler)"}"#.utf8)
            }
            let response = emulator.handle(try builder.request())
            return response.status == 200 ? "accepted" : "\(response.status) \(reason(response) ?? "?")"
        }
        #expect(try answer("voip", "com.example.app.voip") == "accepted")
        #expect(try answer("liveactivity", "com.example.app.push-type.liveactivity") == "accepted")
        #expect(try answer("voip", "com.example.app") == "400 InvalidPushType")
        #expect(try answer("voip", ".voip") == "400 InvalidPushType")
        #expect(try answer("liveactivity", "com.example.app") == "400 InvalidPushType")
        #expect(try answer("liveactivity", "com.example.app.voip") == "400 InvalidPushType")
        #expect(try answer("alert", "com.example.app.voip") == "400 TopicDisallowed")
        #expect(try answer("background", "com.example.app.push-type.liveactivity", priority: "5") == "400 TopicDisallowed")
        #expect(try answer("alert", "com.example.app.push-type.liveactivity") == "400 TopicDisallowed")
        // VoIP payloads may be 5120 bytes; others stop at 4096.
        #expect(try answer("voip", "com.example.app.voip", bodySize: 5120) == "accepted")
        #expect(try answer("voip", "com.example.app.voip", bodySize: 5121) == "413 PayloadTooLarge")
        #expect(try answer("alert", "com.example.app", bodySize: 4097) == "413 PayloadTooLarge")
        let pushTypes = emulator.acceptedNotifications.map { "\($0.pushType) \($0.topic)" }
        #expect(pushTypes == ["voip com.example.app.voip", "liveactivity com.example.app.push-type.liveactivity", "voip com.example.app.voip"])
    }

    /// The rest of Apple's `apns-push-type` table: each suffix, `mdm` on the bare (UID) topic, and the bodies
    /// Apple documents without `aps` (`mdm`, `fileprovider`), which every other type still needs.
    @Test func everyOtherPushTypeWithItsTopicAndBody() throws {
        func answer(_ pushType: String, _ topic: String, priority: String = "10", body: String = #"{"aps":{}}"#) throws -> String {
            var builder = self.builder
            builder.headers["apns-push-type"] = pushType
            builder.headers["apns-topic"] = topic
            builder.headers["apns-priority"] = priority
            builder.body = Array(body.utf8)
            let response = emulator.handle(try builder.request())
            return response.status == 200 ? "accepted" : "\(response.status) \(reason(response) ?? "?")"
        }
        #expect(try answer("location", "com.example.app.location-query", priority: "5") == "accepted")
        #expect(try answer("pushtotalk", "com.example.app.voip-ptt") == "accepted")
        #expect(try answer("complication", "com.example.app.complication") == "accepted")
        #expect(try answer("widgets", "com.example.app.push-type.widgets", body: #"{"aps":{"content-changed":true}}"#) == "accepted")
        #expect(try answer("fileprovider", "com.example.app.pushkit.fileprovider", body: #"{"container-identifier":"root"}"#) == "accepted")
        #expect(try answer("mdm", "com.apple.mgmt.External.5e5a", body: #"{"mdm":"magic"}"#) == "accepted")
        for (type, topic) in [("location", "com.example.app"), ("pushtotalk", "com.example.app.voip"), ("widgets", "com.example.app"),
                              ("complication", "com.example.app"), ("fileprovider", "com.example.app.fileprovider")] {
            #expect(try answer(type, topic) == "400 InvalidPushType", "\(type) \(topic)")
        }
        #expect(try answer("alert", "com.example.app.push-type.widgets") == "400 TopicDisallowed")
        #expect(try answer("mdm", "com.example.app.voip-ptt", body: #"{"mdm":"m"}"#) == "400 TopicDisallowed")
        #expect(try answer("location", "com.example.app.location-query", body: #"{"on":{}}"#) == "400 PayloadEmpty")
        #expect(try answer("mdm", "com.apple.mgmt.External.5e5a", body: "{}") == "400 PayloadEmpty")
    }

    @Test func payloadOfExactly4096BytesIsAccepted() throws {
        var builder = self.builder
        let skeleton = #"{"aps":{"alert":{"body":""}}}"#
        builder.body = Array((#"{"aps":{"alert":{"body":""# + String(repeating: "x", count: 4096 - skeleton.utf8.count) + #""}}}"#).utf8)
        #expect(builder.body.count == 4096)
        #expect(emulator.handle(try builder.request()).status == 200)
    }

    static let conventions: [(prefix: String, status: Int, reason: String)] = [
        ("0400", 400, "BadDeviceToken"),
        ("0403", 400, "DeviceTokenNotForTopic"),
        ("0410", 410, "Unregistered"),
        ("0411", 410, "ExpiredToken"),
        ("0413", 413, "PayloadTooLarge"),
        ("0429", 429, "TooManyRequests"),
        ("0500", 500, "InternalServerError"),
        ("0599", 503, "ServiceUnavailable"),
    ]

    @Test(arguments: 0..<conventions.count) func tokenConventions(index: Int) throws {
        let row = Self.conventions[index]
        var builder = self.builder
        builder.token = row.prefix + String(repeating: "f", count: 60)
        for _ in 0..<2 {  // the same answer every time
            let response = emulator.handle(try builder.request())
            #expect(response.status == row.status)
            #expect(reason(response) == row.reason)
            let body = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
            if row.status == 410 {
                #expect((body["timestamp"] as? NSNumber)?.int64Value == 1_700_000_100_000)
            } else {
                #expect(body["timestamp"] == nil)
            }
        }
        #expect(emulator.acceptedCount == 0)
        #expect(emulator.statusCounts[row.status] == 2)
    }

    @Test func serviceUnavailableOnceThenAccepted() throws {
        var builder = self.builder
        builder.token = "0503" + String(repeating: "e", count: 60)
        let first = emulator.handle(try builder.request())
        #expect(first.status == 503 && reason(first) == "ServiceUnavailable")
        let retry = emulator.handle(try builder.request())
        #expect(retry.status == 200)
        #expect(retry.header("apns-id") == builder.headers["apns-id"])
        // A different apns-id (another delivery) to the same token gets its own 503 first.
        builder.headers["apns-id"] = UUID().uuidString
        #expect(emulator.handle(try builder.request()).status == 503)
        #expect(emulator.handle(try builder.request()).status == 200)
        #expect(emulator.acceptedCount == 2)
    }

    @Test func conventionsComeAfterValidation() throws {
        var builder = self.builder
        builder.token = "0410" + String(repeating: "f", count: 60)
        let response = emulator.handle(try builder.request(authorization: "bearer x.y.z"))
        #expect(response.status == 403)
    }

    @Test func onAcceptSeesEveryAcceptedRequest() throws {
        let lines = Mutex<[String]>([])
        let recording = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                     retainLimit: 2, now: { Date(timeIntervalSince1970: 1_700_000_100) },
                                     onAccept: { accepted in lines.withLock { $0.append(accepted.jsonLine) } })
        for _ in 0..<3 { #expect(recording.handle(try builder.request()).status == 200) }
        var rejected = builder
        rejected.token = "0400" + String(repeating: "f", count: 60)
        #expect(recording.handle(try rejected.request()).status == 400)
        #expect(lines.withLock { $0.count } == 3)
        #expect(recording.acceptedCount == 3)
        #expect(recording.acceptedNotifications.count == 2, "retainLimit keeps the most recent")
    }
}
