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

    /// Runs `pushizo-worker preview FILE` and returns its exit status, standard output and peak resident
    /// set size in bytes: `ru_maxrss` from `wait4`, the kernel's high-water mark of the child's RSS (the
    /// `VmHWM` of `/proc/<pid>/status`, which is gone once the process has exited).
    static func preview(_ document: JSONValue) throws -> (status: Int32, output: JSONValue?, peakRSS: Int) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-render-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("input.json").path
        let output = directory.appendingPathComponent("output.json").path
        try Data(document.serialized()).write(to: URL(fileURLWithPath: input))

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var arguments: [UnsafeMutablePointer<CChar>?] = ([executable, "preview", input] as [String]).map { strdup($0) }
        arguments.append(nil)
        defer { arguments.forEach { free($0) } }
        var environment: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin")]
        environment.append(nil)
        defer { environment.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, arguments, environment)
        guard spawned == 0 else { throw SpawnError(message: "posix_spawn \(executable): error \(spawned)") }
        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 {
            guard errno == EINTR else { throw SpawnError(message: "wait4: error \(errno)") }
        }
        let exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
        let printed = FileManager.default.contents(atPath: output).flatMap { try? JSONValue(parsing: Array($0)) }
        return (exitStatus, printed, Int(usage.ru_maxrss) * 1024)
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
                _ = try QueueStore.expandNext(on: seed.connection)
                let claimed = try QueueStore.claim(on: seed.connection, limit: 10, leaseSeconds: 60, workerID: "render")
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
