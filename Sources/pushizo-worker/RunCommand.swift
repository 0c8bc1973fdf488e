import Foundation
import Worker

enum RunCommand {
    static func main(environment: [String: String], arguments: [String]) async throws {
        let reader = try ConfigurationReader(
            environment: environment, arguments: arguments, keys: WorkerConfiguration.keys,
            booleanKeys: [ConfigurationKey.exitWhenDrained.name, ConfigurationKey.allowPrivateNetworks.name])
        let configuration = try WorkerConfiguration(reader)
        let logger = try LoggerConfiguration.make(reader, label: "worker")
        let runtime = try WorkerRuntime(
            configuration: configuration, logger: logger,
            onReady: { SystemdNotifier.notify("READY=1\nSTATUS=claiming deliveries") })
        let signals = SignalHandling { signal in
            SystemdNotifier.notify("STOPPING=1\nSTATUS=finishing in-flight sends")
            logger.notice("signal received", ["signal": signal == SIGTERM ? "SIGTERM" : "SIGINT"])
            runtime.requestStop()
        }
        await runtime.run()
        withExtendedLifetime(signals) {}
    }
}
