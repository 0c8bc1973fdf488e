import BuildInfo
import Foundation
import Testing
import Worker

/// `pushizo-worker help` lists every setting: its text is generated from ``ConfigurationKey/all``, and every key
/// declared in ConfigurationKey.swift must be in that list (else the worker would also refuse it as unknown).
@Suite("pushizo-worker help")
struct HelpTests {
    static func helpText(_ command: String = "help") async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
        process.arguments = [command]
        process.environment = ["PATH": "/usr/bin:/bin"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = try await onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
        try await onThread { process.waitUntilExit() }
        #expect(process.terminationStatus == 0)
        return text
    }

    /// `--version` and `version`: one line, the release from `VERSION` and the commit built (BuildInfo).
    @Test(arguments: ["--version", "version"])
    func versionNamesTheReleaseAndTheCommit(command: String) async throws {
        let text = try await Self.helpText(command)
        #expect(text == "pushizo-worker \(BuildInfo.version) (\(BuildInfo.commit))\n")
        #expect(text == BuildInfo.versionLine + "\n")
    }

    @Test func everyKeyAndItsFlagAppear() async throws {
        let text = try await Self.helpText()
        for key in ConfigurationKey.all {
            #expect(text.contains(key.name), "\(key.name) missing from help")
            #expect(text.contains(key.flag + " "), "\(key.flag) missing from help")
        }
        #expect(!text.contains("in this version"))
    }

    /// The text format's `<N>` syslog prefixes lead a line only when stderr is the journal's stream (Logger), and
    /// the help says so rather than promising them always.
    @Test func logFormatHelpSaysWhenThePriorityPrefixesAppear() async throws {
        let text = try await Self.helpText()
        let line = try #require(text.split(separator: "\n").first { $0.contains("PUSHIZO_LOG_FORMAT") })
        let description = ConfigurationKey.logFormat.summary
        #expect(description.contains("only when stderr is the journal (JOURNAL_STREAM)"), "\(line)")
        #expect(!description.contains("with <N> priority prefixes"))
        #expect(text.contains("JOURNAL_STREAM"))
    }

    /// Every `ConfigurationKey("PUSHIZO_...")` declared in the source is in ``ConfigurationKey/all``.
    @Test func everyDeclaredKeyIsListed() throws {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/Worker/Configuration/ConfigurationKey.swift")
        let text = try String(contentsOf: source, encoding: .utf8)
        let declared = Set(
            text.matches(of: /ConfigurationKey\(\s*"(PUSHIZO_[A-Z0-9_]+)"/).map { String($0.output.1) })
        #expect(declared.count > 20)
        #expect(declared == Set(ConfigurationKey.all.map(\.name)))
    }
}
