import Foundation
import HTTP2
import Postgres
import Worker

enum RunCommand {
    static func main(environment: [String: String], arguments: [String]) async throws {
        let reader = try ConfigurationReader(
            environment: environment, arguments: arguments, keys: WorkerConfiguration.keys,
            booleanKeys: [ConfigurationKey.exitWhenDrained.name])
        let configuration = try WorkerConfiguration(reader)
        let logger = try LoggerConfiguration.make(reader, label: "worker")

        let database = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: configuration.databaseConnections)
        let eventLoop = try HTTP2EventLoop(name: "pushizo-io")
        var clientConfiguration = HTTP2ClientConfiguration()
        clientConfiguration.maximumConnectionsPerOrigin = configuration.connectionsPerOrigin
        clientConfiguration.requestTimeout = .milliseconds(Int64(configuration.requestTimeout * 1000))
        let http = HTTP2Client(
            eventLoop: eventLoop,
            tls: TLSClientConfiguration(trustRoots: configuration.caFile.map { .pemFile($0) } ?? .system),
            configuration: clientConfiguration)
        let pipeline = DeliveryPipeline(
            senders: [APNsSender(client: http, requestTimeout: configuration.requestTimeout, logger: logger.named("apns"))],
            maxAttempts: configuration.maxAttempts, retryPolicy: configuration.retryPolicy, logger: logger)
        let service = WorkerService(
            configuration: configuration, database: database, processor: pipeline, logger: logger,
            onReady: { SystemdNotifier.notify("READY=1\nSTATUS=claiming deliveries") })
        let signals = SignalHandling { signal in
            SystemdNotifier.notify("STOPPING=1\nSTATUS=finishing in-flight sends")
            logger.notice("signal received", ["signal": signal == SIGTERM ? "SIGTERM" : "SIGINT"])
            service.requestStop()
        }
        await service.run()
        await http.shutdown()
        eventLoop.shutdown()
        await database.shutdown()
        withExtendedLifetime(signals) {}
    }
}
