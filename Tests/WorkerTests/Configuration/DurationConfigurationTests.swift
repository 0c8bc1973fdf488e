import Foundation
import Testing
import Worker

/// Every duration key is read by one parser: plain seconds (the form they always took) or a number with a unit.
@Suite("Durations in the configuration")
struct DurationConfigurationTests {
    let base = ["PUSHIZO_DATABASE_URL": "host=/tmp"]

    func configuration(_ extra: [String: String]) throws -> WorkerConfiguration {
        try WorkerConfiguration(
            ConfigurationReader(
                environment: base.merging(extra) { _, new in new }, arguments: [], keys: WorkerConfiguration.keys))
    }

    @Test(arguments: [
        ("30", Duration.seconds(30)), ("0.25", .milliseconds(250)), (" 2 ", .seconds(2)), ("500ms", .milliseconds(500)),
        ("30s", .seconds(30)), ("1.5 m", .seconds(90)), ("5min", .seconds(300)), ("2h", .seconds(7200)),
        ("0", .zero), ("10MS", .milliseconds(10)), ("1d", .seconds(86_400)), ("30 d", .seconds(30 * 86_400)),
    ])
    func acceptedForms(text: String, expected: Duration) {
        #expect(DurationText.parse(text) == expected)
    }

    @Test(arguments: ["", "s", "-1", "1w", "5 mins", "1m30s", "nan", "inf", "1e3", "0x10", ".", "1..2"])
    func refusedForms(text: String) {
        #expect(DurationText.parse(text) == nil)
    }

    @Test func plainSecondsStillMeanWhatTheyMeant() throws {
        let configuration = try configuration([
            "PUSHIZO_LEASE_SECONDS": "90", "PUSHIZO_POLL_INTERVAL": "0.05", "PUSHIZO_SHUTDOWN_TIMEOUT": "45",
            "PUSHIZO_REQUEST_TIMEOUT": "10", "PUSHIZO_QUIET_HOURS_SPREAD": "600",
        ])
        #expect(configuration.lease == .seconds(90))
        #expect(configuration.pollInterval == .milliseconds(50))
        #expect(configuration.shutdownTimeout == .seconds(45))
        #expect(configuration.requestTimeout == .seconds(10))
        #expect(configuration.quietHoursSpread == .seconds(600))
        #expect(configuration.deliveryTimeout == .seconds(20))
    }

    @Test func unitsAreAccepted() throws {
        let configuration = try configuration([
            "PUSHIZO_LEASE_SECONDS": "5m", "PUSHIZO_POLL_INTERVAL": "250ms", "PUSHIZO_SHUTDOWN_TIMEOUT": "1m",
            "PUSHIZO_RETRY_BASE": "500ms", "PUSHIZO_RETRY_MAX": "1h", "PUSHIZO_HEARTBEAT_INTERVAL": "250ms",
        ])
        #expect(configuration.heartbeatInterval == .milliseconds(250))
        #expect(try self.configuration([:]).heartbeatInterval == .seconds(5))
        #expect(configuration.lease == .seconds(300))
        #expect(configuration.pollInterval == .milliseconds(250))
        #expect(configuration.shutdownTimeout == .seconds(60))
        #expect(configuration.retryPolicy.baseDelay == .milliseconds(500))
        #expect(configuration.retryPolicy.maximumDelay == .seconds(3600))
    }

    /// A bad value and a value out of range both name the key, the accepted range and the accepted forms.
    @Test(arguments: [
        ("PUSHIZO_POLL_INTERVAL", "fast"), ("PUSHIZO_POLL_INTERVAL", "10ms"), ("PUSHIZO_LEASE_SECONDS", "2d"),
        ("PUSHIZO_SHUTDOWN_TIMEOUT", "2h"), ("PUSHIZO_QUIET_HOURS_SPREAD", "-5"), ("PUSHIZO_REQUEST_TIMEOUT", "0"),
        ("PUSHIZO_HEARTBEAT_INTERVAL", "50ms"), ("PUSHIZO_HEARTBEAT_INTERVAL", "10m"), ("PUSHIZO_HEARTBEAT_INTERVAL", "off"),
    ])
    func badDurationsNameTheKey(key: String, value: String) throws {
        do {
            _ = try configuration([key: value])
            Issue.record("\(key)=\(value) was accepted")
        } catch let error as ConfigurationError {
            #expect(error.key == key)
            #expect(error.description.contains("\"\(value)\""))
            #expect(error.description.contains("500ms, 30s, 5m"))
        }
    }

    @Test func rangesAreDescribedInTheirUnits() {
        #expect(DurationText.describe(.milliseconds(50)) == "50 ms")
        #expect(DurationText.describe(.seconds(60)) == "60 s")
        #expect(DurationText.describe(.milliseconds(1500)) == "1.5 s")
        #expect(DurationText.describe(.seconds(86_400)) == "86400 s")
        #expect(DurationText.describe(.seconds(30 * 86_400)) == "30 d")
    }
}
