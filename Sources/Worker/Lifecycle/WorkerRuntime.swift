import Foundation
import HTTP2
import Postgres

/// Everything `pushizo-worker run` owns, assembled from a ``WorkerConfiguration``: the PostgreSQL pool, the
/// HTTP/2 I/O thread and client, the provider senders, the pipeline and the ``WorkerService``.
/// ``run()`` returns after a stop request once everything is shut down in order.
public final class WorkerRuntime: Sendable {
    public let service: WorkerService
    private let database: PostgresClient
    private let eventLoop: HTTP2EventLoop
    private let http: HTTP2Client

    /// - Throws: `HTTP2Error` when the I/O thread cannot be started (epoll/eventfd unavailable).
    public init(
        configuration: WorkerConfiguration, logger: Logger, onReady: @escaping @Sendable () -> Void = {}
    ) throws {
        database = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: configuration.databaseConnections)
        eventLoop = try HTTP2EventLoop(name: "pushizo-io")
        var clientConfiguration = HTTP2ClientConfiguration()
        clientConfiguration.maximumConnectionsPerOrigin = configuration.connectionsPerOrigin
        clientConfiguration.requestTimeout = configuration.requestTimeout
        clientConfiguration.egressPolicy = configuration.egressPolicy
        http = HTTP2Client(
            eventLoop: eventLoop,
            tls: TLSClientConfiguration(trustRoots: configuration.caFile.map { .pemFile($0) } ?? .system),
            configuration: clientConfiguration)
        let pipeline = DeliveryPipeline(
            senders: [
                APNsSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("apns"),
                    egressPolicy: configuration.egressPolicy),
                WebPushSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("webpush"),
                    egressPolicy: configuration.egressPolicy),
                FCMSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("fcm"),
                    egressPolicy: configuration.egressPolicy),
            ],
            maxAttempts: configuration.maxAttempts, retryPolicy: configuration.retryPolicy, logger: logger,
            quietHoursSpread: Int(configuration.quietHoursSpread.components.seconds), maxUncountedRetries: configuration.maxUncountedRetries,
            deliveryTimeout: configuration.deliveryTimeout.inSeconds,
            loadMessages: { [database] ids in
                try await database.withConnection { connection in
                    try QueueStore.messages(
                        on: connection, notificationIDs: ids, maximumBytes: MessageCache.maximumMessageBytes)
                }
            },
            reserveFrequencyCap: { [database] request in
                try await database.withConnection { connection in
                    try QueueStore.reserveFrequencyCap(on: connection, request)
                }
            })
        service = WorkerService(
            configuration: configuration, database: database, processor: pipeline, logger: logger, onReady: onReady)
    }

    /// Runs the service until it stops, then closes HTTP/2 connections, the I/O thread and the database pool.
    public func run() async {
        await service.run()
        await http.shutdown()
        eventLoop.shutdown()
        await database.shutdown()
    }

    /// See ``WorkerService/requestStop()``.
    public func requestStop() {
        service.requestStop()
    }
}
