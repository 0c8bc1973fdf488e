import DeliveryCore
import Foundation
import HTTP2
import Worker

/// `pushizo-worker preview [FILE]`: reads one preview document (docs/preview.md) from FILE or stdin and prints
/// the decision and the exact provider request as JSON. Contacts nothing. `PUSHIZO_ALLOW_PRIVATE_NETWORKS` applies
/// as for `run` (endpoint overrides, Web Push hosts). Exit 0 with the decision (even
/// "fail"), 2 when the document itself is malformed.
enum PreviewCommand {
    static func main(environment: [String: String], arguments: [String]) throws {
        // The worker's egress switch decides what preview accepts, so it shows what `run` would do.
        let reader = try ConfigurationReader(environment: environment, arguments: [], keys: [])
        let egressPolicy = EgressPolicy(allowsPrivateNetworks: try reader.bool(.allowPrivateNetworks))
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
        let output = try Preview.run(input, egressPolicy: egressPolicy)
        // Not JSONEncoder: it would round numbers in `data` through Double; this keeps their text.
        print(output.prettyJSONText)
    }
}
