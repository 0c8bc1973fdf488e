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
    private let systemd: SystemdReporter?

    /// - Parameters:
    ///   - systemdStatus: send `STATUS=` lines (rate, queue lag, in flight) every few seconds through
    ///     ``SystemdNotifier`` (set when `$NOTIFY_SOCKET` is).
    ///   - watchdog: systemd's watchdog interval (``SystemdNotifier/watchdogInterval()``): `WATCHDOG=1` is sent
    ///     every half interval while the claim loop, the completer and the HTTP/2 I/O thread all make
    ///     progress (``WatchdogPolicy``); `nil` = no watchdog.
    /// - Throws: `HTTP2Error` when the I/O thread cannot be started (epoll/eventfd unavailable).
    public init(
        configuration: WorkerConfiguration, logger: Logger, onReady: @escaping @Sendable () -> Void = {},
        systemdStatus: Bool = false, watchdog: Duration? = nil
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
        // One APNs provider token / FCM access token per credential for the whole fleet, through the database;
        // a worker waits for another's mint at most as long as a token request may take, plus a margin.
        let tokens = SharedProviderTokens(
            database: database, logger: logger.named("tokens"),
            capacity: CacheBounds.standard.apnsTokenManagers + CacheBounds.standard.googleTokenCaches,
            lockTimeout: configuration.requestTimeout.inSeconds + 5)
        let pipeline = DeliveryPipeline(
            senders: [
                APNsSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("apns"),
                    egressPolicy: configuration.egressPolicy, bounds: .standard, tokens: tokens),
                WebPushSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("webpush"),
                    egressPolicy: configuration.egressPolicy),
                FCMSender(
                    client: http, requestTimeout: configuration.requestTimeout.inSeconds, logger: logger.named("fcm"),
                    egressPolicy: configuration.egressPolicy, bounds: .standard, tokens: tokens),
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
        let service = WorkerService(
            configuration: configuration, database: database, processor: pipeline, logger: logger, onReady: onReady)
        self.service = service
        if systemdStatus || watchdog != nil {
            let eventLoop = eventLoop
            systemd = SystemdReporter(
                watchdog: watchdog,
                sources: SystemdReporter.Sources(
                    loops: service.watchedLoops, ioThread: LoopHeartbeat(name: "HTTP/2 I/O thread"),
                    probeIOThread: { eventLoop.probe($0) }, progress: { service.progress },
                    sampleQueueLag: { await service.sampleQueueLag() }),
                logger: logger.named("systemd"))
        } else {
            systemd = nil
        }
    }

    /// Runs the service until it stops, then closes HTTP/2 connections, the I/O thread and the database pool.
    public func run() async {
        systemd?.start()
        await service.run()
        systemd?.stop()
        await http.shutdown()
        eventLoop.shutdown()
        await database.shutdown()
    }

    /// See ``WorkerService/requestStop()``.
    public func requestStop() {
        service.requestStop()
    }
}
