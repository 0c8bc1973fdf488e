import DeliveryCore
import Foundation
import Worker

/// `pushizo-worker preview [FILE]`: reads one preview document (docs/preview.md) from FILE or stdin and prints
/// the decision and the exact provider request as JSON. Contacts nothing. Exit 0 with the decision (even
/// "fail"), 2 when the document itself is malformed.
enum PreviewCommand {
    static func main(arguments: [String]) throws {
        guard arguments.count <= 1 else {
            throw PreviewError("usage: pushizo-worker preview [FILE]  (reads stdin without FILE)")
        }
        let data: Data
        if let path = arguments.first, path != "-" {
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw PreviewError("cannot read \(path)")
            }
            data = contents
        } else {
            data = FileHandle.standardInput.readDataToEndOfFile()
        }
        let input: JSONValue
        do {
            input = try JSONValue(parsing: Array(data))
        } catch {
            throw PreviewError("the input is not JSON")
        }
        let output = try Preview.run(input)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let text = (try? encoder.encode(output)).map { String(decoding: $0, as: UTF8.self) } ?? output.jsonText
        print(text)
    }
}
