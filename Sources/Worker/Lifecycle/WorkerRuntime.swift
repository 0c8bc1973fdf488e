import DeliveryCore
import Foundation
import HTTP2
import Metrics
import MetricsServer
import Postgres
import Synchronization

/// Everything `pushizo-worker run` owns, assembled from a ``WorkerConfiguration``: the PostgreSQL pool, the
/// HTTP/2 I/O thread and clients, the provider senders, the pipeline, the ``WorkerService``, the systemd
/// reporter and the metrics listener. ``run()`` returns after a stop request once everything is shut down in order.
public final class WorkerRuntime: Sendable {
    public let service: WorkerService
    private let database: PostgresClient
    private let eventLoop: HTTP2EventLoop
    /// One HTTP/2 client (one pool) per provider kind, so each kind's connections and streams are counted
    /// apart and one kind's origins never evict another's connections at the pool's global cap.
    private let clients: [Provider: HTTP2Client]
    /// The APNs clients of certificate-based channels, one per client certificate.
    private let certificateClients: APNsSender.CertificateClients
    private let systemd: SystemdReporter?
    /// Whether `STATUS=` lines go to systemd (`$NOTIFY_SOCKET` is set).
    private let sendsSystemdStatus: Bool
    private let logger: Logger
    /// Written with the fleet's queue sample when this worker measures it.
    private let workerID: String
    private let databaseRoute: DatabaseRoute
    /// What `GET /metrics` shows (docs/metrics.md).
    public let metrics: WorkerMetrics
    private let metricsServer: MetricsHTTPServer?
    /// The start's wait for PostgreSQL (``verifyDatabaseRoute()``) while it runs: a stop request cancels it, which
    /// ends its pause between attempts and a call still waiting for a pool thread at once (a connection attempt
    /// already under way ends at its `connect_timeout`).
    private let startWait = Mutex<Task<Void, any Error>?>(nil)
    /// The listener's own database session (status page, readiness checks); nil without a listener.
    private let listenerDatabase: ListenerDatabase?
    /// What `GET /healthz` and `GET /readyz` answer; nil without a listener.
    private let probes: WorkerProbes?

    /// - Parameters:
    ///   - systemdStatus: send `STATUS=` lines (rate, queue lag, in flight) every few seconds through
    ///     ``SystemdNotifier`` (set when `$NOTIFY_SOCKET` is).
    ///   - watchdog: systemd's watchdog interval (``SystemdNotifier/watchdogInterval()``): `WATCHDOG=1` is sent
    ///     every half interval while the claim loop, the expand loops (when expanding), the completer and the
    ///     HTTP/2 I/O thread all make progress (``WatchdogPolicy``); `nil` = no watchdog.
    ///   - metrics: the metrics this run records (tests pass their own to read them).
    /// - Throws: `HTTP2Error` when the I/O thread cannot be started (epoll/eventfd unavailable);
    ///   ``ConfigurationError`` for `PUSHIZO_CA_FILE` when it is not a readable PEM bundle
    ///   (``WorkerConfiguration/trustRoots()``), and for `PUSHIZO_METRICS_LISTEN` when the metrics listener cannot
    ///   start.
    public convenience init(
        configuration: WorkerConfiguration, logger: Logger, onReady: @escaping @Sendable () -> Void = {},
        systemdStatus: Bool = false, watchdog: Duration? = nil, metrics: WorkerMetrics = WorkerMetrics()
    ) throws {
        try self.init(
            configuration: configuration, logger: logger, onReady: onReady, systemdStatus: systemdStatus,
            watchdog: watchdog, metrics: metrics, resolvers: .standard())
    }

    /// As the public initializer, with the resolvers host names are looked up on (tests pass resolvers whose
    /// lookups go to a DNS server of their own).
    init(
        configuration: WorkerConfiguration, logger: Logger, onReady: @escaping @Sendable () -> Void = {},
        systemdStatus: Bool = false, watchdog: Duration? = nil, metrics: WorkerMetrics = WorkerMetrics(),
        resolvers: WorkerResolvers
    ) throws {
        let trustRoots = try configuration.trustRoots()
        let reporter = ReporterSlot()
        sendsSystemdStatus = systemdStatus
        self.metrics = metrics
        self.logger = logger
        workerID = configuration.workerID
        databaseRoute = configuration.databaseRoute
        database = PostgresClient(
            connectionString: configuration.databaseURL, maximumConnections: configuration.databaseConnections,
            poolerMode: PostgresPoolerMode(configuration.databaseRoute.poolerMode))
        eventLoop = try HTTP2EventLoop(name: "pushizo-io")
        var clientConfiguration = HTTP2ClientConfiguration()
        clientConfiguration.maximumConnectionsPerOrigin = configuration.connectionsPerOrigin
        clientConfiguration.requestTimeout = configuration.requestTimeout
        clientConfiguration.egressPolicy = configuration.egressPolicy
        let tls = TLSClientConfiguration(trustRoots: trustRoots)
        let eventLoop = self.eventLoop
        // Host names chosen by subscribers (Web Push) and by apps (channel endpoint overrides, FCM `token_uri`) are
        // looked up on resolvers of their own, shared fairly by registrable domain and app, so a name whose DNS
        // never answers (each lookup holding a thread for the C library's whole timeout) cannot hold up the
        // providers' own hosts, nor another app's names.
        clientConfiguration.resolver = resolvers.forAPNsAndFCM
        var webPushConfiguration = clientConfiguration
        webPushConfiguration.resolver = resolvers.forWebPush
        let apnsClient = HTTP2Client(eventLoop: eventLoop, tls: tls, configuration: clientConfiguration)
        let fcmClient = HTTP2Client(eventLoop: eventLoop, tls: tls, configuration: clientConfiguration)
        let webPushClient = HTTP2Client(eventLoop: eventLoop, tls: tls, configuration: webPushConfiguration)
        let huaweiClient = HTTP2Client(eventLoop: eventLoop, tls: tls, configuration: clientConfiguration)
        self.clients = [.apns: apnsClient, .fcm: fcmClient, .webpush: webPushClient, .huawei: huaweiClient]
        let certificateClients = APNsSender.CertificateClients(
            capacity: CacheBounds.standard.apnsCertificateClients,
            expiry: metrics.credentialExpiry
        ) { [clientConfiguration] identity in
            HTTP2Client(
                eventLoop: eventLoop, tls: TLSClientConfiguration(trustRoots: tls.trustRoots, clientIdentity: identity),
                configuration: clientConfiguration)
        }
        self.certificateClients = certificateClients
        // One APNs provider token / FCM or Huawei access token per credential for the whole fleet, through the database;
        // a worker waits for another's mint at most as long as a token request may take, plus a margin.
        let tokens = SharedProviderTokens(
            database: database, logger: logger.named("tokens"),
            capacity: CacheBounds.standard.apnsTokenManagers + CacheBounds.standard.googleTokenCaches,
            lockTimeout: configuration.requestTimeout + .seconds(5), metrics: metrics)
        let requestTimeout = configuration.requestTimeout
        let pipeline = DeliveryPipeline(
            senders: [
                APNsSender(
                    client: apnsClient, requestTimeout: requestTimeout, logger: logger.named(Provider.apns.rawValue),
                    egressPolicy: configuration.egressPolicy, bounds: .standard, tokens: tokens,
                    certificateClients: certificateClients),
                WebPushSender(
                    client: webPushClient, requestTimeout: requestTimeout, logger: logger.named(Provider.webpush.rawValue),
                    egressPolicy: configuration.egressPolicy),
                FCMSender(
                    client: fcmClient, requestTimeout: requestTimeout, logger: logger.named(Provider.fcm.rawValue),
                    egressPolicy: configuration.egressPolicy, bounds: .standard, tokens: tokens,
                    chargeProjects: { [database] asks in
                        try await database.withConnection { connection in
                            try FCMProjectQuotaStore.charge(on: connection, asks: asks)
                        }
                    }),
                HuaweiSender(
                    client: huaweiClient, requestTimeout: requestTimeout, logger: logger.named(Provider.huawei.rawValue),
                    egressPolicy: configuration.egressPolicy, bounds: .standard, tokens: tokens),
            ],
            maxAttempts: configuration.maxAttempts, retryPolicy: configuration.retryPolicy, logger: logger,
            quietHoursSpread: Int(configuration.quietHoursSpread.components.seconds),
            maxUncountedRetries: configuration.maxUncountedRetries,
            deliveryTimeout: configuration.deliveryTimeout,
            loadMessages: { [database] ids in
                try await database.withConnection { connection in
                    try MessageStore.messages(
                        on: connection, notificationIDs: ids, maximumBytes: MessageCache.maximumMessageBytes)
                }
            },
            reserveFrequencyCap: { [database] request in
                try await database.withConnection { connection in
                    try FrequencyCapStore.reserve(on: connection, request)
                }
            }, metrics: metrics)
        let service = WorkerService(
            configuration: configuration, database: database, processor: pipeline,
            prefetch: ClaimedBatchPrefetch(
                messages: pipeline.messages, tokens: tokens, tokenKeys: { [pipeline] in pipeline.sharedTokenKeys(of: $0) }),
            logger: logger, onReady: { [reporter] in
                onReady()
                // After READY=1: systemd arms the watchdog only then, so the first WATCHDOG=1 follows it.
                reporter.value?.markReady()
            }, metrics: metrics,
            liveActivityChannels: LiveActivityChannelSender(
                client: apnsClient, tokens: tokens, egressPolicy: configuration.egressPolicy, requestTimeout: requestTimeout,
                retryPolicy: configuration.retryPolicy, maxAttempts: configuration.maxAttempts))
        self.service = service
        // One stamp of the I/O thread for the systemd watchdog and `GET /healthz`: both probe it the same way.
        let ioThread = LoopHeartbeat(name: "HTTP/2 I/O thread")
        if systemdStatus || watchdog != nil {
            let made = SystemdReporter(
                watchdog: watchdog,
                sources: SystemdReporter.Sources(
                    loops: service.watchedLoops, ioThread: ioThread,
                    probeIOThread: { eventLoop.probe($0) }, progress: { service.progress },
                    sampleQueueLag: { await service.sampleQueueLag() }),
                logger: logger.named("systemd"))
            systemd = made
            reporter.value = made
        } else {
            systemd = nil
        }
        if let address = configuration.metricsListen {
            ProcessMetrics.register(in: metrics.registry)
            let listenerDatabase = ListenerDatabase(
                connectionString: configuration.databaseURL, poolerMode: PostgresPoolerMode(configuration.databaseRoute.poolerMode))
            self.listenerDatabase = listenerDatabase
            let probes = WorkerProbes(
                watchdog: watchdog, loops: service.watchedLoops, ioThread: ioThread, probeIOThread: { eventLoop.probe($0) },
                database: listenerDatabase, isStopping: { [service] in service.isStopping },
                verifySchema: { try WorkerSchema.verify(on: $0) }, metrics: metrics,
                onSchemaRefused: { [logger] refusal in
                    // Once per refusal met while running: /readyz answers 503 from now on, and only a restart (with
                    // a newer binary, or after `migrate`) makes this worker ready again.
                    logger.error("schema refused while running; this worker stays unready", ["problem": refusal])
                })
            self.probes = probes
            service.onDatabaseContact { reached in reached ? probes.loopReached() : probes.loopFailed() }
            let statusPage = StatusPageSource(database: listenerDatabase) { probes.listenerRead(succeeded: $0) }
            let pages: [String: @Sendable () -> ListenerPage] = [
                "/healthz": { probes.liveness() }, "/readyz": { probes.readiness() }, "/": { statusPage.page() },
            ]
            do {
                let server = try MetricsHTTPServer(address: address, registry: metrics.registry, pages: pages)
                metricsServer = server
                logger.info("metrics listening", ["address": "\(address.description)", "port": "\(server.port)"])
            } catch {
                eventLoop.shutdown()
                throw ConfigurationError(key: ConfigurationKey.metricsListen.name, problem: error.message)
            }
        } else {
            metricsServer = nil
            listenerDatabase = nil
            probes = nil
        }
    }

    /// Checks the database before ``run()``: the route (``DatabaseRoute/verify(_:listen:)``) on a pool connection,
    /// and on the `LISTEN` route's own connection when that is a different one, the role's table rights
    /// (``WorkerRights/verify(on:)``) and the schema's migrations (``WorkerSchema/verify(on:known:)``: a schema
    /// behind this build, or beyond its compatibility window, is refused). While PostgreSQL cannot be reached, waits and retries every second (the pool
    /// paces its connection attempts further, ``PostgresClient``), sending `STATUS=waiting for PostgreSQL: <reason>`
    /// to systemd each time and logging at a bounded rate (``DatabaseStartWait``). A stop request ends the wait
    /// (``requestStop()``; an attempt under way ends at its `connect_timeout`), and ``run()`` then starts nothing.
    /// - Throws: ``ConfigurationError`` naming the key whose setting the route contradicts, or whose connection
    ///   PostgreSQL refuses for good (``PostgresError/needsReconfiguration``: exit 78 without retrying).
    public func verifyDatabaseRoute() async throws {
        let wait = Task { try await self.verifyEachRoute() }
        startWait.withLock { $0 = wait }
        // A stop requested before the task was stored did not see it: cancel it here (``requestStop()`` sets the
        // stop before it reads the slot, so one of the two cancels it).
        if service.isStopping { wait.cancel() }
        defer { startWait.withLock { $0 = nil } }
        try await withTaskCancellationHandler { try await wait.value } onCancel: { wait.cancel() }
    }

    /// ``verifyDatabaseRoute()``'s work, on each route in turn.
    private func verifyEachRoute() async throws {
        let route = databaseRoute
        var routes: [(client: PostgresClient, listen: Bool)] = [(database, false)]
        if route.poolerMode == .transaction, let listenURL = route.listenURL {
            routes.append((
                PostgresClient(connectionString: listenURL, maximumConnections: 1, applicationName: "pushizo-worker-listen"),
                true))
        }
        for (client, listen) in routes {
            do {
                try await waitForDatabase(client, listen: listen)
            } catch {
                if listen { await client.shutdown() }
                throw error
            }
            if listen { await client.shutdown() }
        }
    }

    /// The queue's form (``QueueTopology/read(on:)``), a catalog it cannot be read from refused as a setting of
    /// `PUSHIZO_DATABASE_URL` (exit 78): the worker cannot know which statements to run.
    static func readTopology(on connection: PostgresConnection) throws -> QueueTopology {
        do {
            return try QueueTopology.read(on: connection)
        } catch let unreadable as QueueTopology.Unreadable {
            throw ConfigurationError(
                key: ConfigurationKey.databaseURL.name, problem: "the queue's form cannot be read: \(unreadable)")
        }
    }

    /// Refuses a topology whose statements this build does not run (exit 78, before anything is claimed): on a
    /// Citus-distributed queue the claim, lease renewal and completion run lane by lane, but the expansion
    /// statements still read and write across lanes (docs/scale-out.md, "The hot statements" and "Limits"), which
    /// Citus refuses or runs as multi-shard writes.
    static func refuseUnsupported(_ topology: QueueTopology) throws {
        guard case .lanes(let lanes) = topology else { return }
        throw ConfigurationError(
            key: ConfigurationKey.databaseURL.name,
            problem: "the database's queue is distributed by Citus (\(lanes.count) lanes); this worker's expansion "
                + "runs on a single PostgreSQL only (docs/scale-out.md, Limits)")
    }

    /// ``verifyDatabaseRoute()`` for one route.
    private func waitForDatabase(_ client: PostgresClient, listen: Bool) async throws {
        let route = databaseRoute
        var wait = DatabaseStartWait(key: listen ? .listenDatabaseURL : .databaseURL)
        while !service.isStopping {
            do {
                let (newer, topology) = try await client.withConnection { connection -> ([String], QueueTopology?) in
                    try route.verify(connection, listen: listen)
                    guard !listen else { return ([], nil) }
                    try WorkerRights.verify(on: connection)
                    let newer = try WorkerSchema.verify(on: connection)
                    return (newer, try Self.readTopology(on: connection))
                }
                if let topology {
                    try Self.refuseUnsupported(topology)
                    service.adopt(topology)
                    logger.info("queue topology read", ["topology": topology.description])
                }
                if !listen { probes?.schemaVerified() }
                if !newer.isEmpty {
                    logger.notice(
                        "schema has migrations newer than this worker; running within the compatibility window",
                        ["migrations": newer.joined(separator: ",")])
                }
                return
            } catch let refusal as ConfigurationError {
                throw refusal
            } catch {
                // A stop cancelled the attempt (or it failed meanwhile): the start ends without a word about it.
                if service.isStopping { return }
                switch wait.failed(error, now: .now) {
                case .giveUp(let refusal):
                    throw refusal
                case .retry(let status, let log):
                    if sendsSystemdStatus {
                        // A datagram to a full socket may block: off the cooperative pool.
                        Thread.detachNewThread { SystemdNotifier.notify(status) }
                    }
                    if log {
                        logger.warning(
                            "waiting for PostgreSQL; retrying",
                            ["error": "\(error)", "listen": "\(listen)", "attempts": "\(wait.failures)"])
                    }
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
    }

    /// Runs the service until it stops, then closes HTTP/2 connections, the I/O thread, the database pool and
    /// the metrics listener. After a stop requested before it (while ``verifyDatabaseRoute()`` waited for
    /// PostgreSQL) the service does not start: nothing was claimed, and only the closing is done.
    public func run() async {
        if service.isStopping {
            logger.notice("stopped before the worker started; nothing was claimed")
        } else {
            systemd?.start()
            let sampler = Task { [metrics, database, clients, logger, workerID] in
                await metrics.runSampler(
                    database: database, clients: clients, workerID: workerID, logger: logger.named("metrics"))
            }
            await service.run()
            systemd?.stop()
            sampler.cancel()
            await sampler.value
        }
        for client in clients.values { await client.shutdown() }
        await certificateClients.shutdown()
        eventLoop.shutdown()
        await database.shutdown()
        await metricsServer?.shutdown()
        if let listenerDatabase {
            // Closing may wait for a status page's read to end: off the cooperative pool.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread.detachNewThread {
                    listenerDatabase.close()
                    continuation.resume()
                }
            }
        }
    }

    /// See ``WorkerService/requestStop()``; also ends the start's wait for PostgreSQL (``verifyDatabaseRoute()``).
    public func requestStop() {
        service.requestStop()
        startWait.withLock { $0 }?.cancel()
    }
}

/// The systemd reporter, once made: the readiness callback is handed to the service before the reporter exists.
private final class ReporterSlot: Sendable {
    private let slot = Mutex<SystemdReporter?>(nil)

    var value: SystemdReporter? {
        get { slot.withLock { $0 } }
        set { slot.withLock { $0 = newValue } }
    }
}
