import Emulator
import Foundation
import Worker

/// `pushizo-worker emulator-subscription --seed SEED --origin https://host:port ID...`: prints, per id, one
/// tab-separated line `id endpoint p256dh auth` for the Web Push emulator's deterministic subscriptions
/// (docs/emulator.md), so the demo and tests can insert rows the emulator started with the same seed
/// decrypts. The private key is never printed.
enum EmulatorSubscriptionCommand {
    static let usage = "usage: pushizo-worker emulator-subscription --seed SEED --origin https://host:port ID..."

    static func main(arguments: [String]) throws {
        var seed: String?
        var origin: String?
        var ids: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--seed", "--origin":
                guard index + 1 < arguments.count else { throw UsageError("\(argument) needs a value\n\(usage)") }
                if argument == "--seed" { seed = arguments[index + 1] } else { origin = arguments[index + 1] }
                index += 2
            default:
                ids.append(argument)
                index += 1
            }
        }
        guard let seed, let origin, origin.hasPrefix("https://"), !origin.hasSuffix("/"), !ids.isEmpty else {
            throw UsageError(usage)
        }
        let subscriptions = WebPushEmulatorSubscriptions(seed: seed)
        var output = ""
        for id in ids {
            let subscription = try subscriptions.subscription(id: id)
            output += "\(id)\t\(subscription.endpoint(origin: origin))\t\(subscription.p256dh)\t\(subscription.auth)\n"
        }
        FileHandle.standardOutput.write(Data(output.utf8))
    }
}
