import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Postgres

extension WorkerMetrics {
    /// The time between two samples of the queue and of the HTTP/2 pools.
    public static let sampleInterval: Duration = .seconds(15)

    /// The queue sample takes at most this share of one database backend's time, fleet-wide: after a sample
    /// that took `t` seconds the next is taken no sooner than `t / queueSampleDutyCycle` later (a slow sample
    /// on a huge queue is taken less often instead of keeping a backend busy).
    static let queueSampleDutyCycle = 0.05

    /// Samples each provider kind's HTTP/2 pool every `interval`, and the fleet's queue sample
    /// (``QueueDepthStore/sharedQueueDepth(on:interval:dutyCycle:sampler:timeoutMilliseconds:)``) as often: whichever worker finds it
    /// due measures it, the others read it, so the fleet measures the queue once per `interval` (or less often
    /// when measuring is slow, ``queueSampleDutyCycle``) however many workers run. Until the task is cancelled.
    /// A scrape only reads the last sample, so scrapes never reach the database, however often they come.
    /// - Parameters:
    ///   - clients: the HTTP/2 client of each provider.
    ///   - workerID: written with a sample this worker measures.
    func runSampler(
        database: PostgresClient, clients: [Provider: HTTP2Client], workerID: String, interval: Duration = sampleInterval,
        logger: Logger
    ) async {
        let failureLog = LogRateLimiter(interval: .seconds(600))
        while !Task.isCancelled {
            await sampleQueue(database: database, workerID: workerID, interval: interval, logger: logger, failureLog: failureLog)
            for (provider, client) in clients {
                let statistics = await client.statistics()
                let labels = LabelValues(provider.rawValue)
                http2Connections.set(Double(statistics.connections), labels)
                http2Streams.set(Double(statistics.openStreams), labels)
                http2Waiting.set(Double(statistics.waitingRequests), labels)
            }
            try? await Task.sleep(for: interval)
        }
    }

    private func sampleQueue(
        database: PostgresClient, workerID: String, interval: Duration, logger: Logger, failureLog: LogRateLimiter
    ) async {
        do {
            let shared = try await database.withConnection { connection in
                self.recordServer(connection.serverAddress)
                return try QueueDepthStore.sharedQueueDepth(
                    on: connection, interval: interval, dutyCycle: Self.queueSampleDutyCycle,
                    sampler: workerID)
            }
            if let shared { record(shared.sample, at: shared.sampledAt) }
        } catch {
            queueSampleFailures.add()
            if failureLog.allow("sample") {
                logger.warning(
                    "sampling the queue for metrics failed; the pushizo_queue_* gauges keep their last values",
                    ["error": "\(error)"])
            }
        }
    }

    /// Names the server in `pushizo_database_server_info`: one series at a time (the previous server's is
    /// dropped), so the label values stay as few as the hosts of the connection string.
    func recordServer(_ server: PostgresServerAddress?) {
        guard let server else { return }
        databaseServer.replaceAll([LabelValues(server.host, server.port): 1])
    }

    /// The `paused_by` label of `pushizo_channels_paused`: an operator's pause (`paused_reason = 'operator'`).
    static let pausedByOperator = "operator"
    /// The `paused_by` label of `pushizo_channels_paused`: the provider's pause (the worker paused the channel on the
    /// provider's refusal of the app's credentials or settings; any reason but the operator's).
    static let pausedByProvider = "provider"

    /// Puts a sample in the gauges (every provider present, zeros included, so alerts see 0 rather than
    /// no series).
    func record(_ sample: QueueDepthSample, at now: Date = Date()) {
        var depths: [LabelValues: Double] = [:]
        var ages: [LabelValues: Double] = [:]
        var paused: [LabelValues: Double] = [:]
        let providers = Set(Provider.allCases.map(\.rawValue)).union(sample.depth.keys)
        for provider in providers {
            let label = Self.providerLabel(column: provider == Self.noProvider ? nil : provider)
            let depth = sample.depth[provider] ?? QueueDepthSample.Depth()
            depths[LabelValues(label, "due")] = Double(depth.due)
            depths[LabelValues(label, "held")] = Double(depth.held)
            depths[LabelValues(label, "deferred")] = Double(depth.deferred)
            depths[LabelValues(label, "leased")] = Double(depth.leased)
            ages[LabelValues(label)] = depth.oldestDueAge
        }
        // A sample stored by a worker that predates the operator's counts has none: its pauses count as the
        // provider's, as that worker's own gauge counted them.
        for provider in Provider.allCases.map(\.rawValue) {
            let all = sample.pausedChannels[provider] ?? 0
            let byOperator = min(sample.operatorPausedChannels?[provider] ?? 0, all)
            paused[LabelValues(provider, Self.pausedByOperator)] = Double(byOperator)
            paused[LabelValues(provider, Self.pausedByProvider)] = Double(all - byOperator)
        }
        queueDeliveries.replaceAll(depths)
        queueOldestDueAge.replaceAll(ages)
        channelsPaused.replaceAll(paused)
        appsPaused.set(Double(sample.pausedApps ?? 0))
        fleetPaused.set(sample.fleetPaused == true ? 1 : 0)
        let channels = sample.liveActivityChannels ?? QueueDepthSample.LiveActivityChannelCounts()
        liveActivityChannels.replaceAll([
            LabelValues("pending"): Double(channels.pending), LabelValues("failed"): Double(channels.failed),
        ])
        queuedLiveActivityChannelSends.replaceAll([
            LabelValues("due"): Double(channels.sendsDue), LabelValues("deferred"): Double(channels.sendsDeferred),
            LabelValues("leased"): Double(channels.sendsLeased),
        ])
        queueSampledAt.set(now.timeIntervalSince1970)
        queueSampleFraction.set(sample.sampledFraction ?? 1)
    }
}
