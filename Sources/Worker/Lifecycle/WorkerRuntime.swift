import Foundation
import HTTP2
import MetricsServer
import Postgres

/// Everything `pushizo-worker run` owns, assembled from a ``WorkerConfiguration``: the PostgreSQL pool, the
/// HTTP/2 I/O thread and client, the provider senders, the pipeline and the ``WorkerService``.
/// ``run()`` returns after a stop request once everything is shut down in order.
public final class WorkerRuntime: Sendable {
    public let service: WorkerService
    private let database: PostgresClient
    private let eventLoop: HTTP2EventLoop
    /// One HTTP/2 client (one pool) per provider kind, so each kind's connections and streams are counted
    /// apart and one kind's origins never evict another's connections at the pool's global cap.
    private let clients: [String: HTTP2Client]
    private let logger: Logger
    /// What `GET /metrics` shows (docs/metrics.md).
    public let metrics: WorkerMetrics
    private let metricsServer: MetricsHTTPServer?

    /// - Parameter metrics: the metrics this run records (tests pass their own to read them).
    /// - Throws: `HTTP2Error` when the I/O thread cannot be started (epoll/eventfd unavailable);
    ///   ``ConfigurationError`` for `PUSHIZO_METRICS_LISTEN` when the metrics listener cannot start.
    public init(
        configuration: WorkerConfiguration, logger: Logger, onReady: @escaping @Sendable () -> Void = {},
        metrics: WorkerMetrics = WorkerMetrics()
    ) throws {
        self.metrics = metrics
        self.logger = logger
        database = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: configuration.databaseConnections)
        eventLoop = try HTTP2EventLoop(name: "pushizo-io")
        var clientConfiguration = HTTP2ClientConfiguration()
        clientConfiguration.maximumConnectionsPerOrigin = configuration.connectionsPerOrigin
        clientConfiguration.requestTimeout = .milliseconds(Int64(configuration.requestTimeout * 1000))
        clientConfiguration.egressPolicy = configuration.egressPolicy
        let tls = TLSClientConfiguration(trustRoots: configuration.caFile.map { .pemFile($0) } ?? .system)
        let eventLoop = self.eventLoop
        let clients = Dictionary(uniqueKeysWithValues: ["apns", "fcm", "webpush"].map {
            ($0, HTTP2Client(eventLoop: eventLoop, tls: tls, configuration: clientConfiguration))
        })
        self.clients = clients
        let pipeline = DeliveryPipeline(
            senders: [
                APNsSender(
                    client: clients["apns"]!, requestTimeout: configuration.requestTimeout, logger: logger.named("apns"),
                    egressPolicy: configuration.egressPolicy, metrics: metrics),
                WebPushSender(
                    client: clients["webpush"]!, requestTimeout: configuration.requestTimeout,
                    logger: logger.named("webpush"), egressPolicy: configuration.egressPolicy),
                FCMSender(
                    client: clients["fcm"]!, requestTimeout: configuration.requestTimeout, logger: logger.named("fcm"),
                    egressPolicy: configuration.egressPolicy, metrics: metrics),
            ],
            maxAttempts: configuration.maxAttempts, retryPolicy: configuration.retryPolicy, logger: logger,
            quietHoursSpread: configuration.quietHoursSpread, maxUncountedRetries: configuration.maxUncountedRetries,
            deliveryTimeout: configuration.deliveryTimeout,
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
            }, metrics: metrics)
        service = WorkerService(
            configuration: configuration, database: database, processor: pipeline, logger: logger, onReady: onReady,
            metrics: metrics)
        if let address = configuration.metricsListen {
            ProcessMetrics.register(in: metrics.registry)
            do {
                let server = try MetricsHTTPServer(address: address, registry: metrics.registry)
                metricsServer = server
                logger.info("metrics listening", ["address": "\(address.description)", "port": "\(server.port)"])
            } catch {
                eventLoop.shutdown()
                throw ConfigurationError(key: ConfigurationKey.metricsListen.name, problem: error.message)
            }
        } else {
            metricsServer = nil
        }
    }

    /// Runs the service until it stops, then closes HTTP/2 connections, the I/O thread and the database pool.
    public func run() async {
        let sampler = Task { [metrics, database, clients, logger] in
            await metrics.runSampler(database: database, clients: clients, logger: logger.named("metrics"))
        }
        await service.run()
        sampler.cancel()
        await sampler.value
        for client in clients.values { await client.shutdown() }
        eventLoop.shutdown()
        await database.shutdown()
        await metricsServer?.shutdown()
    }

    /// See ``WorkerService/requestStop()``.
    public func requestStop() {
        service.requestStop()
    }
}
