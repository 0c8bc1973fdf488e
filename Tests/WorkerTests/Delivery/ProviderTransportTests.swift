import DeliveryCore
import HTTP2
import Testing
@testable import Worker

/// How transport failures become delivery outcomes (attempt counting follows `CompletionFactory`).
@Suite("ProviderTransport outcome mapping")
struct ProviderTransportTests {
    private func reason(_ outcome: DeliveryOutcome) -> String? {
        if case .retry(let reason, _, _) = outcome { return reason }
        return nil
    }

    @Test func aResponseOverTheReadBoundsIsACountedRetry() {
        let error = HTTP2Error(.responseTooLarge, "the response from https://push.example was not read: its body exceeds maximumResponseBodySize (65536 bytes)")
        let outcome = ProviderTransport.outcome(for: error, origin: "https://push.example")
        #expect(reason(outcome) == "response_too_large")
        // The provider had the whole request: the retry spends an attempt, so the delivery ends at max_attempts.
        #expect(!CompletionFactory.uncountedRetryReasons.contains("response_too_large"))
    }

    @Test func unsentAndMaybeSentFailuresKeepTheirReasons() {
        #expect(reason(ProviderTransport.outcome(for: HTTP2Error(.tlsHandshakeFailed, "x", isSafeToRetry: true), origin: "o")) == "provider_unreachable")
        #expect(reason(ProviderTransport.outcome(for: HTTP2Error(.connectionClosed, "x"), origin: "o")) == "transport_error")
    }
}
