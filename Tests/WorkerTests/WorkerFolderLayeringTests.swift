import Foundation
import Testing

/// The `Worker` module's folders form layers, and a file names only types of its own layer or of those below
/// it, so the walk from claim to event crosses the folders in one direction (docs/architecture.md, "Where the
/// code lives"). A type is placed in the folder of the file that declares it at the top level (not private);
/// a name declared in two folders is not judged. Comments are not read; string literals are (an interpolation
/// names types too).
@Suite("Worker folders in one direction")
struct WorkerFolderLayeringTests {
    /// Bottom to top. A new folder must be placed here.
    static let layers = [
        "Logging", "Configuration", "Metrics", "Queue", "Delivery", "Preview", "Status", "Maintenance", "Services",
        "Listener", "Lifecycle", "Operator",
    ]

    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/Worker")

    /// Each Swift file of the module: its folder and text.
    static func files() throws -> [(folder: String, path: String, text: String)] {
        var files: [(String, String, String)] = []
        let manager = FileManager.default
        for folder in try manager.contentsOfDirectory(atPath: sources.path).sorted() {
            let directory = sources.appendingPathComponent(folder)
            guard let walker = manager.enumerator(atPath: directory.path) else { continue }
            for case let relative as String in walker where relative.hasSuffix(".swift") {
                let text = try String(contentsOf: directory.appendingPathComponent(relative), encoding: .utf8)
                files.append((folder, "\(folder)/\(relative)", text))
            }
        }
        return files
    }

    static func matches(_ pattern: String, in text: String, group: Int = 0) -> [String] {
        let expression = try! NSRegularExpression(pattern: pattern, options: [.anchorsMatchLines])
        let range = NSRange(text.startIndex..., in: text)
        return expression.matches(in: text, range: range).compactMap { match in
            Range(match.range(at: group), in: text).map { String(text[$0]) }
        }
    }

    @Test func everyFolderHasALayer() throws {
        let folders = Set(try Self.files().map(\.folder))
        #expect(folders.subtracting(Self.layers).isEmpty, "folders without a layer: \(folders.subtracting(Self.layers))")
    }

    @Test func noFileNamesATypeOfAHigherFolder() throws {
        let files = try Self.files()
        var declaredIn: [String: String] = [:]
        var declaredTwice = Set<String>()
        let declaration =
            #"^(?:@\w+\s+)*((?:(?:public|internal|private|fileprivate|final|open|package|indirect)\s+)*)(?:class|struct|enum|protocol|actor|typealias)\s+(\w+)"#
        for file in files {
            let expression = try NSRegularExpression(pattern: declaration, options: [.anchorsMatchLines])
            for match in expression.matches(in: file.text, range: NSRange(file.text.startIndex..., in: file.text)) {
                guard let modifiers = Range(match.range(at: 1), in: file.text), let name = Range(match.range(at: 2), in: file.text)
                else { continue }
                if file.text[modifiers].contains("private") { continue }
                let type = String(file.text[name])
                if let folder = declaredIn[type], folder != file.folder { declaredTwice.insert(type) }
                declaredIn[type] = declaredIn[type] ?? file.folder
            }
        }
        for type in declaredTwice { declaredIn[type] = nil }
        #expect(declaredIn.count > 100, "the declarations were not found")
        let rank = Dictionary(uniqueKeysWithValues: Self.layers.enumerated().map { ($1, $0) })
        for file in files {
            // Each line up to a `//` (a comment, or a URL in a string).
            let code = file.text.split(separator: "\n", omittingEmptySubsequences: false)
                .map { line in line.range(of: "//").map { String(line[..<$0.lowerBound]) } ?? String(line) }
                .joined(separator: "\n")
            for name in Set(Self.matches(#"\b[A-Z]\w+\b"#, in: code)) {
                guard let folder = declaredIn[name], let used = rank[folder], let own = rank[file.folder] else { continue }
                #expect(used <= own, "\(file.path) names \(name), declared in \(folder), a higher folder")
            }
        }
    }

    /// The delivery stage (and `preview`, which shares its decision and plans) is handed everything it needs with
    /// the claimed batch, and what it must still ask the fleet (a provider token that is due) goes through a
    /// closure the services wire: none of its files names the database.
    @Test func theDeliveryStageHasNoDatabaseHandle() throws {
        for file in try Self.files() where ["Delivery", "Preview"].contains(file.folder) {
            for name in ["import Postgres", "PostgresConnection", "PostgresClient"] {
                #expect(!file.text.contains(name), "\(file.path) names \(name)")
            }
        }
    }
}
