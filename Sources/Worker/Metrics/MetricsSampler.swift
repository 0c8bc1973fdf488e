import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Postgres

extension WorkerMetrics {
    /// Seconds between two samples of the queue and of the HTTP/2 pools.
    public static let sampleInterval: Double = 15

    /// The queue sample takes at most this share of one database connection's time: after a sample that took
    /// `t` seconds the next waits at least `t / queueSampleDutyCycle` (a slow sample on a huge queue is taken
    /// less often instead of keeping a backend busy).
    static let queueSampleDutyCycle = 0.05

    /// Samples each provider kind's HTTP/2 pool every `interval` seconds and the queue
    /// (``QueueStore/sampleQueueDepth(on:)``) as often, or less often when the sample is slow
    /// (``queueSampleDutyCycle``); both at once first, until the task is cancelled. A scrape only reads the
    /// last sample, so scrapes never reach the database, however often they come.
    /// - Parameter clients: the HTTP/2 client of each provider kind (`apns`, `fcm`, `webpush`).
    func runSampler(
        database: PostgresClient, clients: [String: HTTP2Client], interval: Double = sampleInterval, logger: Logger
    ) async {
        let failureLog = LogRateLimiter(interval: 600)
        var nextQueueSample = ContinuousClock.now
        while !Task.isCancelled {
            if ContinuousClock.now >= nextQueueSample {
                let started = ContinuousClock.now
                await sampleQueue(database: database, logger: logger, failureLog: failureLog)
                let took = Self.seconds(since: started)
                nextQueueSample = started + .milliseconds(Int64(max(interval, took / Self.queueSampleDutyCycle) * 1000))
            }
            for (provider, client) in clients {
                let statistics = await client.statistics()
                let labels = LabelValues(provider)
                http2Connections.set(Double(statistics.connections), labels)
                http2Streams.set(Double(statistics.openStreams), labels)
                http2Waiting.set(Double(statistics.waitingRequests), labels)
            }
            try? await Task.sleep(for: .seconds(interval))
        }
    }

    private func sampleQueue(database: PostgresClient, logger: Logger, failureLog: LogRateLimiter) async {
        do {
            let sample = try await database.withConnection { try QueueStore.sampleQueueDepth(on: $0) }
            record(sample)
        } catch {
            queueSampleFailures.add()
            if failureLog.allow("sample") {
                logger.warning(
                    "sampling the queue for metrics failed; the pushizo_queue_* gauges keep their last values",
                    ["error": "\(error)"])
            }
        }
    }

    /// Puts a sample in the gauges (every provider present, zeros included, so alerts see 0 rather than
    /// no series).
    func record(_ sample: QueueDepthSample, at now: Date = Date()) {
        var depths: [LabelValues: Double] = [:]
        var ages: [LabelValues: Double] = [:]
        var paused: [LabelValues: Double] = [:]
        let providers = Set(Provider.allCases.map(\.rawValue)).union(sample.depth.keys)
        for provider in providers {
            let label = Self.providerLabel(provider == Self.noProvider ? nil : provider)
            let depth = sample.depth[provider] ?? QueueDepthSample.Depth()
            depths[LabelValues(label, "due")] = Double(depth.due)
            depths[LabelValues(label, "deferred")] = Double(depth.deferred)
            depths[LabelValues(label, "leased")] = Double(depth.leased)
            ages[LabelValues(label)] = depth.oldestDueAge
        }
        for provider in Provider.allCases.map(\.rawValue) {
            paused[LabelValues(provider)] = Double(sample.pausedChannels[provider] ?? 0)
        }
        queueDeliveries.replaceAll(depths)
        queueOldestDueAge.replaceAll(ages)
        channelsPaused.replaceAll(paused)
        queueSampledAt.set(now.timeIntervalSince1970)
    }
}
