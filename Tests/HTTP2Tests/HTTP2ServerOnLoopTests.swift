import Foundation
import Synchronization
import Testing
@testable import HTTP2

/// A server whose handler answers on the loop thread (`answeringOnLoop`) serves as the task-per-request one does.
@Suite("HTTP2 server answering on its loop")
struct HTTP2ServerOnLoopTests {
    @Test func answersManyConcurrentRequestsOnTheLoopThread() async throws {
        let loop = try HTTP2EventLoop(name: "test-on-loop")
        defer { loop.shutdown() }
        let offLoop = Atomic<Int>(0)
        // The body back, under a name written with capitals (HTTP/2 wants it lower-cased on the wire).
        let onLoop = HTTP2Server(eventLoop: loop, tls: nil, answeringOnLoop: { request in
            if !loop.inLoop { offLoop.add(1, ordering: .relaxed) }
            return HTTP2ServerResponse(
                status: 200, headers: [HTTP2Header("X-Echo-Path", request.path)], body: request.body)
        })
        let port = try onLoop.start()
        var configuration = HTTP2ClientConfiguration()
        // Queued requests wait as long as the machine's load makes them: this test is not about the queue wait.
        configuration.maximumQueueWait = nil
        let client = HTTP2Client(eventLoop: loop, configuration: configuration)
        let origin = HTTP2Origin(scheme: .http, host: "127.0.0.1", port: port)
        let answers = try await withThrowingTaskGroup(of: (Int, HTTP2Response).self) { group in
            for index in 0..<300 {
                group.addTask {
                    let request = HTTP2Request(method: "POST", path: "/\(index)", body: Array("body \(index)".utf8))
                    return (index, try await client.send(request, to: origin))
                }
            }
            var answers: [Int: HTTP2Response] = [:]
            for try await (index, response) in group { answers[index] = response }
            return answers
        }
        #expect(answers.count == 300)
        for (index, response) in answers {
            #expect(response.status == 200)
            #expect(response.body == Array("body \(index)".utf8))
            #expect(response.headers.first { $0.name == "x-echo-path" }?.value == "/\(index)")
            #expect(response.headers.first { $0.name == "content-length" }?.value == "\("body \(index)".utf8.count)")
        }
        #expect(offLoop.load(ordering: .relaxed) == 0)
        await client.shutdown()
        await onLoop.shutdown()
    }
}
