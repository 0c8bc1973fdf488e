import DeliveryCore
import Foundation
import HTTP2
import Metrics
import Postgres

extension WorkerMetrics {
    /// Seconds between two samples of the queue and of the HTTP/2 pools.
    public static let sampleInterval: Double = 15

    /// Samples the queue (``QueueStore/sampleQueueDepth(on:)``) and each provider kind's HTTP/2 pool every
    /// `interval` seconds, at once first, until the task is cancelled. A scrape only reads the last sample,
    /// so scrapes never reach the database, however often they come.
    /// - Parameter clients: the HTTP/2 client of each provider kind (`apns`, `fcm`, `webpush`).
    func runSampler(
        database: PostgresClient, clients: [String: HTTP2Client], interval: Double = sampleInterval, logger: Logger
    ) async {
        let failureLog = LogRateLimiter(interval: 600)
        while !Task.isCancelled {
            await sampleQueue(database: database, logger: logger, failureLog: failureLog)
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
