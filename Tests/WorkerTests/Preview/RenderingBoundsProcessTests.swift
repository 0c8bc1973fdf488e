import DeliveryCore
import Foundation
import Testing
@testable import Worker

#if canImport(Glibc)
import Glibc
#endif

/// Rendering bounds through the real executable and the worker's own parsing of tags.
@Suite("Rendering bounds")
struct RenderingBoundsProcessTests {
    static var executable: String { GracefulShutdownTests.executable }

    /// A preview document for an iOS subscription whose user has `tags` and whose message has `contents`.
    static func document(contents: String, tags: JSONValue) -> JSONValue {
        [
            "at": "2026-11-29T21:30:00+03:00",
            "app": ["default_language": "en", "channels": ["apns": ["topic": "com.example.app"]]],
            "user": ["tags": tags],
            "subscription": ["platform": "ios", "token": .string(String(repeating: "a0", count: 32))],
            "notification": ["message": ["contents": ["en": .string(contents)]]],
        ]
    }

    /// Runs `pushizo-worker preview FILE` under GNU time (`/usr/bin/time -f %M`) and returns its exit status,
    /// standard output and peak resident set size in bytes.
    ///
    /// Why not `ru_maxrss` from our own `wait4`: Linux carries the high-water mark of the memory a process
    /// replaced at `exec` into its `ru_maxrss`, and a child spawned by this test runner (`posix_spawn` shares
    /// the runner's memory until `exec`) starts from the runner's own peak, easily over 100 MB while other
    /// tests run. GNU time forks from its own small process, so the figure it reports is preview's alone.
    static func preview(_ document: JSONValue) throws -> (status: Int32, output: JSONValue?, peakRSS: Int) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-render-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("input.json").path
        let output = directory.appendingPathComponent("output.json").path
        let peak = directory.appendingPathComponent("peak.txt").path
        try Data(document.serialized()).write(to: URL(fileURLWithPath: input))

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/time")
        process.arguments = ["-f", "%M", "-o", peak, executable, "preview", input]
        process.environment = ["PATH": "/usr/bin:/bin"]
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let printed = FileManager.default.contents(atPath: output).flatMap { try? JSONValue(parsing: Array($0)) }
        // GNU time writes "Command exited with non-zero status N" before the figure when preview fails.
        let kilobytes = (try? String(contentsOfFile: peak, encoding: .utf8))?
            .split(separator: "\n").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard let kilobytes else { throw SpawnError(message: "/usr/bin/time reported no peak RSS") }
        return (process.terminationStatus, printed, kilobytes * 1024)
    }

    @Test func twoThousandPlaceholdersOfATwentyKilobyteTagStayUnderOneHundredMegabytes() async throws {
        // The reported input: it took 792 MB and 20 s of CPU before filling and shortening were bounded.
        let document = Self.document(
            contents: String(repeating: "{{a}}", count: 2000), tags: ["a": .string(String(repeating: "x", count: 20_000))])
        let result = try await onThread { try Self.preview(document) }
        #expect(result.status == 0)
        let request = try #require(result.output?["request"])
        #expect(request["body_bytes"] == 4096)
        #expect(request["body"]?["aps"]?["alert"]?["body"]?.stringValue?.hasSuffix("xx…") == true)
        #expect(result.peakRSS < 100 << 20, "peak RSS \(result.peakRSS >> 20) MB")
    }

    @Test func tagsOverTheLimitRenderAsNoTagsAndSaySo() throws {
        let big = JSONValue.object(["name": "Ayşe", "pad": .string(String(repeating: "p", count: 70_000))])
        var notes: [JSONValue] = []
        let input = try PreviewInput(Self.document(contents: "Hi {{ name | default: \"friend\" }}", tags: big), notes: &notes)
        #expect(input.delivery.userTagsJSON == nil)
        #expect(notes.contains { $0.stringValue?.contains("over the 65536-byte limit") == true })
        let output = try Preview.run(Self.document(contents: "Hi {{ name | default: \"friend\" }}", tags: big))
        #expect(output["request"]?["body"]?["aps"]?["alert"]?["body"] == "Hi friend")

        // Exactly at the limit as PostgreSQL prints it (`{"name": "Ayşe", "pad": "…"}`: 28 bytes and the
        // padding), the tags are used.
        let fits = JSONValue.object(["name": "Ayşe", "pad": .string(String(repeating: "p", count: 65_536 - 28))])
        let used = try Preview.run(Self.document(contents: "Hi {{ name | default: \"friend\" }}", tags: fits))
        #expect(used["request"]?["body"]?["aps"]?["alert"]?["body"] == "Hi Ayşe")
    }

    @Test func longStringTagsAreCutToTheFieldBound() throws {
        var delivery = try Self.claimed()
        delivery.userTagsJSON = JSONValue.object(["a": .string(String(repeating: "€", count: 5000)), "n": 7]).jsonText
        let values = DeliveryRendering.placeholderValues(for: delivery)
        #expect(values.tags["a"] == .string(String(repeating: "€", count: 1365)))  // 4095 bytes
        #expect(values.tags["n"] == 7)
        delivery.userTagsJSON = "{\"a\": \"" + String(repeating: "x", count: DeliveryRendering.maximumUserTagsBytes) + "\"}"
        #expect(DeliveryRendering.placeholderValues(for: delivery).tags.isEmpty)
    }

    @Test func theClaimReadsTagsUpToTheLimitAsPostgreSQLPrintsThem() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await onThread {
                let seed = try Seed(url)
                try seed.app()
                var expected: [UUID: Bool] = [:]
                for (name, padding) in [("at-limit", 65_536 - 28), ("over-limit", 65_536 - 27)] {
                    let user = try seed.user(name)
                    _ = try seed.connection.query(
                        "UPDATE users SET tags = jsonb_build_object('name', 'Ayşe', 'pad', repeat('p', $2)) WHERE id = $1",
                        [user, padding])
                    expected[try seed.subscription(user: user)] = padding == 65_536 - 28
                }
                try seed.notification(target: #"{"include_external_ids": ["at-limit", "over-limit"]}"#)
                _ = try ExpansionStore.expandNext(on: seed.connection)
                let claimed = try ClaimStore.claim(on: seed.connection, limit: 10, lease: .seconds(60), workerID: "render")
                #expect(claimed.count == 2)
                for delivery in claimed {
                    let read = expected[delivery.subscriptionID]
                    #expect(read != nil)
                    #expect((delivery.userTagsJSON != nil) == read)
                    #expect(delivery.userTagsJSON.map { $0.utf8.count } ?? 65_536 == 65_536)
                }
            }
        }
    }

    struct SpawnError: Error {
        var message: String
    }

    /// A complete claimed delivery, as the preview builds one from a document.
    static func claimed() throws -> ClaimedDelivery {
        var notes: [JSONValue] = []
        return try PreviewInput(document(contents: "x", tags: [:]), notes: &notes).delivery
    }
}
