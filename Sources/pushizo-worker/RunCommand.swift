import Foundation
import Worker

enum RunCommand {
    static func main(environment: [String: String], arguments: [String]) async throws {
        let reader = try ConfigurationReader(
            environment: environment, arguments: arguments, keys: WorkerConfiguration.keys)
        let configuration = try WorkerConfiguration(reader)
        let logger = try LoggerConfiguration.make(reader, label: "worker")
        let runtime = try WorkerRuntime(
            configuration: configuration, logger: logger,
            onReady: { SystemdNotifier.notify("READY=1\nSTATUS=claiming deliveries") },
            systemdStatus: SystemdNotifier.isEnabled, watchdog: SystemdNotifier.watchdogInterval())
        let signals = SignalHandling(logger: logger) { received in
            SystemdNotifier.notify("STOPPING=1\nSTATUS=finishing in-flight sends")
            logger.notice("signal received", received.logFields)
            runtime.requestStop()
            // Last resort: the stop is bounded by PUSHIZO_SHUTDOWN_TIMEOUT; should closing connections hang
            // past it, the process ends anyway (leases rescue what it held).
            let limit = configuration.shutdownTimeout.inSeconds + 10
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: limit)
                logger.error("shutdown did not finish in time; exiting", ["after_s": "\(Int(limit))"])
                _exit(70)  // EX_SOFTWARE
            }
        }
        try await runtime.verifyDatabaseRoute()
        await runtime.run()
        withExtendedLifetime(signals) {}
        let unwritten = runtime.service.unwrittenCompletions
        if unwritten > 0 {
            // EX_TEMPFAIL: events were lost with the process; their deliveries are sent again (same apns-id).
            exit(75)
        }
    }
}
