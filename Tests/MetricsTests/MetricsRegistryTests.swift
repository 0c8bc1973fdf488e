import Testing
@testable import Metrics

@Suite("Prometheus text rendering")
struct MetricsRegistryTests {
    @Test func rendersCountersGaugesAndHistogramsExactly() {
        let registry = MetricsRegistry()
        let deliveries = registry.counter("pushizo_deliveries_total", help: "Outcomes.", labels: ["provider", "event"])
        deliveries.add(1, LabelValues("fcm", "sent"))
        deliveries.add(2, LabelValues("apns", "sent"))
        deliveries.add(1, LabelValues("apns", "failed"))
        let inFlight = registry.gauge("pushizo_sends_in_flight", help: "In flight.")
        inFlight.set(3)
        inFlight.add(-1.5)
        let latency = registry.histogram(
            "pushizo_send_duration_seconds", help: "Send time.", labels: ["provider"], buckets: [0.01, 0.1, 1])
        latency.observe(0.005, LabelValues("apns"))
        latency.observe(0.1, LabelValues("apns"))
        latency.observe(7, LabelValues("apns"))
        registry.callback("process_open_fds", help: "Open fds.", type: .gauge) { 12 }
        registry.callback("process_max_fds", help: "Unknown here.", type: .gauge) { nil }
        let empty = registry.counter("pushizo_claimed_deliveries_total", help: "Claimed.")

        #expect(registry.render() == """
            # HELP pushizo_deliveries_total Outcomes.
            # TYPE pushizo_deliveries_total counter
            pushizo_deliveries_total{provider="apns",event="failed"} 1
            pushizo_deliveries_total{provider="apns",event="sent"} 2
            pushizo_deliveries_total{provider="fcm",event="sent"} 1
            # HELP pushizo_sends_in_flight In flight.
            # TYPE pushizo_sends_in_flight gauge
            pushizo_sends_in_flight 1.5
            # HELP pushizo_send_duration_seconds Send time.
            # TYPE pushizo_send_duration_seconds histogram
            pushizo_send_duration_seconds_bucket{provider="apns",le="0.01"} 1
            pushizo_send_duration_seconds_bucket{provider="apns",le="0.1"} 2
            pushizo_send_duration_seconds_bucket{provider="apns",le="1"} 2
            pushizo_send_duration_seconds_bucket{provider="apns",le="+Inf"} 3
            pushizo_send_duration_seconds_sum{provider="apns"} 7.105
            pushizo_send_duration_seconds_count{provider="apns"} 3
            # HELP process_open_fds Open fds.
            # TYPE process_open_fds gauge
            process_open_fds 12
            # HELP process_max_fds Unknown here.
            # TYPE process_max_fds gauge
            # HELP pushizo_claimed_deliveries_total Claimed.
            # TYPE pushizo_claimed_deliveries_total counter
            pushizo_claimed_deliveries_total 0

            """)
        #expect(empty.value() == 0)
        #expect(latency.count(LabelValues("apns")) == 3)
    }

    @Test func unlabelledHistogramRendersZerosBeforeItsFirstObservation() {
        let registry = MetricsRegistry()
        _ = registry.histogram("pushizo_claim_batch_duration_seconds", help: "Claims.", buckets: [0.5])
        #expect(registry.render() == """
            # HELP pushizo_claim_batch_duration_seconds Claims.
            # TYPE pushizo_claim_batch_duration_seconds histogram
            pushizo_claim_batch_duration_seconds_bucket{le="0.5"} 0
            pushizo_claim_batch_duration_seconds_bucket{le="+Inf"} 0
            pushizo_claim_batch_duration_seconds_sum 0
            pushizo_claim_batch_duration_seconds_count 0

            """)
    }

    @Test func escapesHelpTextAndLabelValues() {
        let registry = MetricsRegistry()
        let family = registry.counter("odd_total", help: "back\\slash and\nnew line \"quotes\" kept", labels: ["reason"])
        family.add(1, LabelValues("a\"b\\c\nd"))
        #expect(registry.render() == """
            # HELP odd_total back\\\\slash and\\nnew line "quotes" kept
            # TYPE odd_total counter
            odd_total{reason="a\\"b\\\\c\\nd"} 1

            """)
    }

    @Test func formatsSpecialAndFractionalValues() {
        #expect(Exposition.format(.nan) == "NaN")
        #expect(Exposition.format(.infinity) == "+Inf")
        #expect(Exposition.format(-.infinity) == "-Inf")
        #expect(Exposition.format(0) == "0")
        #expect(Exposition.format(-3) == "-3")
        #expect(Exposition.format(0.005) == "0.005")
        #expect(Exposition.format(1e-7) == "1e-07")
        #expect(Exposition.format(2.5e18) == "2.5e+18")
    }

    @Test func foldsLabelSetsBeyondTheSeriesCapIntoOneOverflowSeries() {
        let family = CounterFamily(name: "capped_total", help: "h", labelNames: ["reason"], maximumSeries: 2)
        family.add(1, LabelValues("a"))
        family.add(1, LabelValues("b"))
        family.add(1, LabelValues("c"))
        family.add(1, LabelValues("d"))
        family.add(1, LabelValues("a"))
        var text = ""
        family.renderSamples(into: &text)
        #expect(text == """
            capped_total{reason="a"} 2
            capped_total{reason="b"} 1
            capped_total{reason="other"} 2

            """)
    }

    @Test func countersIgnoreNegativeAmountsAndHistogramsIgnoreNaN() {
        let registry = MetricsRegistry()
        let counter = registry.counter("c_total", help: "h")
        counter.add(-5)
        counter.add(2)
        let histogram = registry.histogram("h_seconds", help: "h", buckets: [1])
        histogram.observe(.nan)
        #expect(counter.value() == 2)
        #expect(histogram.count() == 0)
    }

    @Test func gaugeReplaceAllDropsSeriesMissingFromTheNewSample() {
        let registry = MetricsRegistry()
        let gauge = registry.gauge("q", help: "h", labels: ["state"])
        gauge.replaceAll([LabelValues("due"): 4, LabelValues("leased"): 1])
        gauge.replaceAll([LabelValues("due"): 0])
        #expect(registry.render().hasSuffix("q{state=\"due\"} 0\n"))
        #expect(gauge.value(LabelValues("leased")) == nil)
    }

    @Test func validatesNames() {
        #expect(MetricName.isValidMetricName("pushizo_up"))
        #expect(MetricName.isValidMetricName("a:b_c9"))
        #expect(!MetricName.isValidMetricName("9lives"))
        #expect(!MetricName.isValidMetricName("bad-name"))
        #expect(!MetricName.isValidMetricName(""))
        #expect(MetricName.isValidLabelName("provider"))
        #expect(!MetricName.isValidLabelName("__reserved"))
        #expect(!MetricName.isValidLabelName("a:b"))
    }
}
