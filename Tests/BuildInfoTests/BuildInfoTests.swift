import Foundation
import Testing
@testable import BuildInfo

/// The build carries the release named in `VERSION` and the commit of the checkout it was built from
/// (scripts/build-info.sh, run before every build by BuildInfoPlugin).
@Suite("BuildInfo")
struct BuildInfoTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func theVersionIsVersionsFirstLine() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("VERSION"), encoding: .utf8)
        let firstLine = text.split(separator: "\n").first.map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(BuildInfo.version == firstLine)
        // Semantic versioning: MAJOR.MINOR.PATCH, an optional -prerelease.
        #expect(BuildInfo.version.wholeMatch(of: /[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?/) != nil, "\(BuildInfo.version)")
    }

    /// A build of code CHANGELOG.md lists under `## Unreleased` is a pre-release of the next version (`0.10.0-dev`),
    /// so `pushizo_build_info{version}` never names a release whose schema it does not have; a release's `VERSION`
    /// is a version CHANGELOG.md heads a section with (`## 0.9.0 - 2026-12-07`), and no Unreleased entries remain.
    @Test func unreleasedCodeIsAPreRelease() throws {
        let changelog = try String(contentsOf: Self.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let sections = changelog.components(separatedBy: "\n## ")
        let unreleased = sections.first { $0.hasPrefix("Unreleased") }
        let hasUnreleasedEntries = unreleased.map { $0.split(separator: "\n").dropFirst().contains { $0.hasPrefix("- ") } } ?? false
        if hasUnreleasedEntries {
            #expect(BuildInfo.version.hasSuffix("-dev"), "CHANGELOG.md has Unreleased entries, VERSION is \(BuildInfo.version)")
            let release = BuildInfo.version.dropLast("-dev".count)
            #expect(!sections.contains { $0.hasPrefix("\(release) ") }, "\(release) is already released")
        } else {
            #expect(sections.contains { $0.hasPrefix("\(BuildInfo.version) ") }, "no CHANGELOG.md section for \(BuildInfo.version)")
        }
    }

    /// The migrations the build needs (what `run` checks the database for) are the files of migrations/.
    @Test func theMigrationsAreTheMigrationFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("migrations").path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(!files.isEmpty)
        #expect(BuildInfo.migrations == files)
    }

    /// The commit is git's HEAD of this checkout (the tests run from the tree they were built from), or `unknown`
    /// where git cannot say.
    @Test func theCommitIsTheCheckoutsHead() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/git")
        process.arguments = ["-C", Self.root.path, "rev-parse", "--short=12", "HEAD"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else {
            #expect(BuildInfo.commit == "unknown")
            return
        }
        // Off the cooperative pool: reading the pipe and waiting block.
        let head = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                continuation.resume(returning: text.trimmingCharacters(in: .whitespacesAndNewlines))
            }
        }
        guard process.terminationStatus == 0 else {
            #expect(BuildInfo.commit == "unknown")
            return
        }
        #expect(BuildInfo.commit == head || BuildInfo.commit == head + "-dirty", "\(BuildInfo.commit) vs \(head)")
        #expect(BuildInfo.versionLine == "pushizo-worker \(BuildInfo.version) (\(BuildInfo.commit))")
    }
}
