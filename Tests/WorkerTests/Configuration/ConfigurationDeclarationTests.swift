import Foundation
import Testing
import Worker

/// Each key's default and range are declared once (``ConfigurationKey``, ``ConfigurationValue``); these tests keep
/// the declarations consistent and the documentation's key tables complete.
@Suite("Configuration key declarations")
struct ConfigurationDeclarationTests {
    @Test(arguments: ConfigurationKey.all)
    func theDefaultLiesInTheRange(_ key: ConfigurationKey) {
        #expect(key.value.defaultIsAccepted, "\(key.name): default \(key.defaultValue ?? "none") outside \(key.rangeText ?? "")")
        switch key.value {
        case .wholeNumber(nil, _), .duration(nil, _, _):
            #expect(key.derivedDefault != nil, "\(key.name) has neither a default nor a derived one")
        case .duration(let value?, _, _):
            // What `help` prints is what the reader accepts, and reads back as the same duration.
            #expect(DurationText.parse(DurationText.short(value)) == value, "\(key.name): \(DurationText.short(value))")
        default:
            break
        }
    }

    /// Whether `reader` reads `key` as the key's declared default; `nil` when the key declares none (free text,
    /// or a default that follows from other keys).
    static func readsAsDeclaredDefault(_ reader: ConfigurationReader, _ key: ConfigurationKey) throws -> Bool? {
        switch key.value {
        case .wholeNumber(let value?, _): try reader.int(key) == value
        case .duration(let value?, _, _): try reader.duration(key) == value
        case .flag(let value): try reader.bool(key) == value
        case .choice(let value, _): try reader.choice(key) == value
        case .list(let value, _): try reader.list(key) == value
        default: nil
        }
    }

    /// A key with a declared default, unset in the environment, reads as that default.
    @Test func unsetKeysReadAsTheirDeclaredDefaults() throws {
        let reader = try ConfigurationReader(environment: [:], arguments: [], keys: [])
        for key in ConfigurationKey.all {
            if let same = try Self.readsAsDeclaredDefault(reader, key) { #expect(same, "\(key.name)") }
        }
    }

    /// A key declared a flag may stand alone on the command line (meaning `true`) without the command listing it.
    @Test func aDeclaredFlagMayStandAlone() throws {
        let reader = try ConfigurationReader(
            environment: [:], arguments: ["--exit-when-drained", "--claim-batch", "7", "--allow-private-networks"],
            keys: WorkerConfiguration.keys)
        #expect(try reader.bool(.exitWhenDrained))
        #expect(try reader.bool(.allowPrivateNetworks))
        #expect(try reader.int(.claimBatch) == 7)
    }

    /// Every key appears in a documented table of keys: README.md's configuration table (the worker's keys) or
    /// docs/emulator.md's (the emulator's), as a table cell starting with the key.
    @Test func theDocumentedTablesNameEveryKey() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        var tableCells = ""
        for document in ["README.md", "docs/emulator.md"] {
            let text = try String(contentsOf: root.appendingPathComponent(document), encoding: .utf8)
            tableCells += text.split(separator: "\n").filter { $0.hasPrefix("| `PUSHIZO_") }
                .map { $0.split(separator: "|").first.map(String.init) ?? "" }.joined(separator: "\n")
        }
        for key in ConfigurationKey.all {
            #expect(tableCells.contains("`\(key.name)`"), "\(key.name) is in no documented table of keys")
        }
    }

    /// Every `PUSHIZO_*` name the scripts, the CI entry point, the Makefile and the documents use is a key of the
    /// worker or lies under a reserved prefix (`PUSHIZO_TEST_*`, ...): the worker refuses any other `PUSHIZO_*`
    /// variable (exit 78), so a script knob of its own in that namespace, exported, would stop a worker run in the
    /// same environment. A name ending in `_` is a prefix written out (`PUSHIZO_EMULATOR_*`).
    @Test func theScriptsKnobsStayOutOfTheWorkersNamespace() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        var files = ["Makefile", "README.md"].map { root.appendingPathComponent($0) }
        for folder in ["scripts", "docs", ".ci"] {
            let enumerator = FileManager.default.enumerator(at: root.appendingPathComponent(folder), includingPropertiesForKeys: nil)
            while let file = enumerator?.nextObject() as? URL { files.append(file) }
        }
        let expression = try NSRegularExpression(pattern: "PUSHIZO_[A-Z0-9_]+")
        var strangers: Set<String> = []
        for file in files {
            guard let text = try? String(contentsOf: file, encoding: .utf8) else { continue }
            for match in expression.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                guard let range = Range(match.range, in: text) else { continue }
                let name = String(text[range])
                if name.hasSuffix("_") { continue }
                if ConfigurationReader.unknownVariables(in: [name: ""]).isEmpty { continue }
                strangers.insert("\(name) (\(file.path.dropFirst(root.path.count + 1)))")
            }
        }
        #expect(strangers.isEmpty, "neither a key nor under \(ConfigurationReader.reservedPrefixes): \(strangers.sorted())")
    }

    /// config/pushizo-worker.env.example shows each setting commented out at its default (`#PUSHIZO_X=value`), so an
    /// operator who uncomments a line changes nothing; a line left empty (`#PUSHIZO_X=`) stands for a derived or
    /// absent default. The keys below are shown with an example value instead, and say so beside it.
    @Test func theExampleEnvironmentFileShowsTheDeclaredDefaults() throws {
        let examples: Set<String> = [
            "PUSHIZO_DATABASE_POOLER", "PUSHIZO_LISTEN_DATABASE_URL", "PUSHIZO_MIGRATIONS_DIR", "PUSHIZO_METRICS_LISTEN",
        ]
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("config/pushizo-worker.env.example"), encoding: .utf8)
        var shown = 0
        for line in text.split(separator: "\n") where line.hasPrefix("#PUSHIZO_") {
            let parts = line.dropFirst().split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            let value = parts.count > 1 ? String(parts[1]) : ""
            guard !examples.contains(name), !value.isEmpty else { continue }
            let key = try #require(ConfigurationKey.all.first { $0.name == name }, "\(name) is not a key")
            let reader = try ConfigurationReader(environment: [name: value], arguments: [], keys: [])
            if let same = try Self.readsAsDeclaredDefault(reader, key) {
                #expect(same, "\(line)")
            } else {
                Issue.record("\(line): \(name) has no declared default to show")
            }
            shown += 1
        }
        #expect(shown >= 15)
    }
}
