import DeliveryCore
import Foundation
import Providers
import PushCrypto
import Testing
@testable import Emulator

/// Every emulator answer checked against the example its provider's document gives (status, headers, body),
/// so third-party clients see what they would see from the real service.
@Suite struct EmulatorFidelityTests {
    func json(_ body: [UInt8]) -> [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] }

    // MARK: APNs

    /// Apple, "Handling notification responses from APNs", sample error response:
    /// ```
    /// HEADERS
    ///   - END_STREAM
    ///   + END_HEADERS
    ///   :status = 400
    ///   content-type = application/json
    ///   apns-id: <a_UUID>
    /// DATA
    ///   + END_STREAM
    ///   { "reason" : "BadDeviceToken" }
    /// ```
    /// and the header table: "apns-id: The same value found in the apns-id field of the request's header.
    /// [...] If you don't specify an apns-id field in your request, APNs creates a new UUID and returns it".
    @Test func apnsErrorAnswersCarryTheRequestsAPNsID() throws {
        let key = try P256PrivateKey.generate()
        let emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                    now: { Date(timeIntervalSince1970: 1_700_000_100) })
        var builder = RequestBuilder(key: key)
        builder.token = "0403" + String(repeating: "f", count: 60)  // 400 DeviceTokenNotForTopic (the issue's example)
        let response = emulator.handle(try builder.request())
        #expect(response.status == 400)
        #expect(response.headers.map(\.name) == ["content-type", "apns-id"])
        #expect(response.header("content-type") == "application/json")
        #expect(response.header("apns-id") == "6b1c2c4e-7a61-4f0c-9c2d-0e3d5b8f9a10")
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"reason":"DeviceTokenNotForTopic"}"#)
    }

    @Test func apnsErrorsWithoutAUsableAPNsIDGetANewUUID() throws {
        let key = try P256PrivateKey.generate()
        let emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                    now: { Date(timeIntervalSince1970: 1_700_000_100) })
        var builder = RequestBuilder(key: key)
        // Every rejection path: before the token check, the token check, header checks, BadMessageId itself.
        var cases: [EmulatorRequest] = []
        builder.headers["apns-id"] = nil
        builder.method = "GET"
        cases.append(try builder.request())  // 405
        builder.method = "POST"
        cases.append(try builder.request(authorization: "bearer nope"))  // 403
        builder.headers["apns-id"] = "not-a-uuid"
        cases.append(try builder.request())  // 400 BadMessageId
        builder.headers["apns-id"] = nil
        builder.token = "0410" + String(repeating: "f", count: 60)
        cases.append(try builder.request())  // 410 with timestamp
        var ids: Set<String> = []
        for request in cases {
            let response = emulator.handle(request)
            #expect(response.status >= 400)
            let id = try #require(response.header("apns-id"))
            #expect(UUID(uuidString: id) != nil && id == id.lowercased())
            ids.insert(id)
            #expect(json(response.body)?["reason"] is String)
        }
        #expect(ids.count == cases.count, "a new UUID per answer")
    }

    /// Apple's sample success: `apns-id = eabeae54-14a8-11e5-b60b-1697f925ec7b`, `:status = 200`, no DATA
    /// frame ("If the request was successful, the body of the response is empty").
    @Test func apnsSuccessIsTheIDAndNoBody() throws {
        let key = try P256PrivateKey.generate()
        let emulator = APNsEmulator(keys: [APNsEmulatorKey(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", publicKey: key.publicKey)],
                                    now: { Date(timeIntervalSince1970: 1_700_000_100) })
        var builder = RequestBuilder(key: key)
        builder.headers["apns-id"] = "eabeae54-14a8-11e5-b60b-1697f925ec7b"
        let response = emulator.handle(try builder.request())
        #expect(response.status == 200)
        #expect(response.headers.map(\.name) == ["apns-id"])
        #expect(response.header("apns-id") == "eabeae54-14a8-11e5-b60b-1697f925ec7b")
        #expect(response.body.isEmpty)
    }

    // MARK: FCM

    func fcm() throws -> (FCMEmulator, String) {
        let key = try RSAPrivateKey.generate()
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let emulator = FCMEmulator(accounts: [FCMEmulatorAccount(clientEmail: "sa@p.iam.gserviceaccount.com", publicKey: key.publicKey)],
                                   now: { now })
        let account = GoogleServiceAccount(projectID: "proj", clientEmail: "sa@p.iam.gserviceaccount.com",
                                           tokenURI: "https://fcm.example/token", privateKey: key)
        let tokenResponse = emulator.handle(EmulatorRequest(
            method: "POST", path: "/token", authority: "fcm.example",
            headers: [EmulatorHeader("content-type", "application/x-www-form-urlencoded")],
            body: GoogleServiceAccount.tokenRequestBody(assertion: try account.assertion(issuedAt: now))))
        return (emulator, try GoogleServiceAccount.parseTokenResponse(tokenResponse.body).accessToken)
    }

    func send(_ emulator: FCMEmulator, _ token: String, _ body: String) -> EmulatorResponse {
        emulator.handle(EmulatorRequest(
            method: "POST", path: "/v1/projects/proj/messages:send", authority: "fcm.example",
            headers: [EmulatorHeader("authorization", "Bearer \(token)"), EmulatorHeader("content-type", "application/json")],
            body: Array(body.utf8)))
    }

    /// Firebase, "FCM error codes", example 2 (an invalid registration token):
    /// ```
    /// {"error": {"code": 400, "message": "The registration token is not a valid FCM registration token",
    ///   "status": "INVALID_ARGUMENT",
    ///   "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"}]}}
    /// ```
    @Test func fcmInvalidTokenMatchesGooglesExample() throws {
        let (emulator, token) = try fcm()
        let response = send(emulator, token, #"{"message": {"token": "fcm-invalid-1", "data": {"a": "1"}}}"#)
        #expect(response.status == 400)
        #expect(response.header("content-type") == "application/json; charset=UTF-8")
        let error = try #require(json(response.body)?["error"] as? [String: Any])
        #expect(error["code"] as? Int == 400)
        #expect(error["message"] as? String == "The registration token is not a valid FCM registration token")
        #expect(error["status"] as? String == "INVALID_ARGUMENT")
        let details = try #require(error["details"] as? [[String: Any]])
        #expect(details.count == 1)
        #expect(details[0]["@type"] as? String == "type.googleapis.com/google.firebase.fcm.v1.FcmError")
        #expect(details[0]["errorCode"] as? String == "INVALID_ARGUMENT")
    }

    /// Firebase, "FCM error codes", example 1 (an invalid value in a data message):
    /// ```
    /// {"error": {"code": 400, "message": "Invalid value at 'message.data[0].value' (TYPE_STRING), 12",
    ///   "status": "INVALID_ARGUMENT",
    ///   "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest",
    ///     "fieldViolations": [{"field": "message.data[0].value",
    ///                          "description": "Invalid value at 'message.data[0].value' (TYPE_STRING), 12"}]}]}}
    /// ```
    @Test func fcmNonStringDataMatchesGooglesExample() throws {
        let (emulator, token) = try fcm()
        let response = send(emulator, token, #"{"message": {"token": "t", "data": {"n": 12}}}"#)
        #expect(response.status == 400)
        let expected = "Invalid value at 'message.data[0].value' (TYPE_STRING), 12"
        let error = try #require(json(response.body)?["error"] as? [String: Any])
        #expect(error["code"] as? Int == 400)
        #expect(error["message"] as? String == expected)
        #expect(error["status"] as? String == "INVALID_ARGUMENT")
        let details = try #require(error["details"] as? [[String: Any]])
        #expect(details.count == 1)
        #expect(details[0]["@type"] as? String == "type.googleapis.com/google.rpc.BadRequest")
        let violations = try #require(details[0]["fieldViolations"] as? [[String: Any]])
        #expect(violations.count == 1)
        #expect(violations[0]["field"] as? String == "message.data[0].value")
        #expect(violations[0]["description"] as? String == expected)
        // The index is the member's position: the second of two keys in order.
        let second = send(emulator, token, #"{"message": {"token": "t", "data": {"a": "x", "b": true}}}"#)
        #expect((json(second.body)?["error"] as? [String: Any])?["message"] as? String == "Invalid value at 'message.data[1].value' (TYPE_STRING), true")
        // The worker reads it as a bad message, not as a token problem.
        guard case .failed(_, _, false) = FCMResponseClassifier.classify(
            PushResponse(status: response.status, headers: response.headers.map { PushHeader($0.name, $0.value) }, body: response.body),
            now: Date())
        else { Issue.record("a data type error must not invalidate the subscription"); return }
    }

    /// Firebase, "FCM error codes" (UNREGISTERED, HTTP 404): `{"error": {"code": 404, "message": "Requested
    /// entity was not found.", "status": "NOT_FOUND", "details": [{"@type":
    /// "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}}`.
    @Test func fcmUnregisteredShape() throws {
        let (emulator, token) = try fcm()
        let response = send(emulator, token, #"{"message": {"token": "fcm-unregistered-1"}}"#)
        #expect(response.status == 404)
        let error = try #require(json(response.body)?["error"] as? [String: Any])
        #expect(error["code"] as? Int == 404 && error["status"] as? String == "NOT_FOUND")
        #expect(error["message"] as? String == "Requested entity was not found.")
        let details = try #require(error["details"] as? [[String: Any]])
        #expect(details.first?["errorCode"] as? String == "UNREGISTERED")
    }
}
