import DeliveryCore
import HTTP2
import Testing
@testable import Worker

/// How transport failures become delivery outcomes (attempt counting follows `CompletionFactory`).
@Suite("ProviderTransport outcome mapping")
struct ProviderTransportTests {
    private func reason(_ outcome: DeliveryOutcome) -> String? {
        if case .retry(let reason, _, _) = outcome { return reason.rawValue }
        return nil
    }

    @Test func aResponseOverTheReadBoundsIsACountedRetry() {
        let error = HTTP2Error(.responseTooLarge, "the response from https://push.example was not read: its body exceeds maximumResponseBodySize (65536 bytes)")
        let outcome = ProviderTransport.outcome(for: error, origin: "https://push.example")
        #expect(reason(outcome) == "response_too_large")
        // The provider had the whole request: the retry spends an attempt, so the delivery ends at max_attempts.
        #expect(!CompletionFactory.uncountedRetryReasons.contains(DeliveryReason.responseTooLarge))
    }

    @Test func unsentAndMaybeSentFailuresKeepTheirReasons() {
        #expect(reason(ProviderTransport.outcome(for: HTTP2Error(.tlsHandshakeFailed, "x", isSafeToRetry: true), origin: "o")) == "provider_unreachable")
        // Withdrawn from a busy origin's queue: never sent; paced without an event (CompletionFactory).
        let busy = ProviderTransport.outcome(for: HTTP2Error(.originBusy, "x", isSafeToRetry: true), origin: "o", subscriberChosen: true)
        #expect(reason(busy) == CompletionFactory.originBusyReason.rawValue)
        if case .retry(_, let detail, _) = busy { #expect(detail["error"]?.stringValue?.contains("came free") == true) }
        #expect(reason(ProviderTransport.outcome(for: HTTP2Error(.connectionClosed, "x"), origin: "o")) == "transport_error")
    }

    @Test(arguments: [
        HTTP2Error(.connectFailed, "connect failed: Connection refused", isSafeToRetry: true),
        HTTP2Error(.connectFailed, "cannot resolve internal.example: Name or service not known", isSafeToRetry: true),
        HTTP2Error(.certificateVerificationFailed, "certificate for 10.0.0.5 did not verify: IP address mismatch"),
        HTTP2Error(.responseTooLarge, "response body over 65536 bytes (status 200)"),
    ])
    func aSubscriberChosenEndpointsFailureRecordsNoNetworkText(error: HTTP2Error) {
        let origin = "https://push.example:8443"
        let withheld = ProviderTransport.outcome(for: error, origin: origin, subscriberChosen: true)
        let plain = ProviderTransport.outcome(for: error, origin: origin)
        // Same decision either way; only the detail's text differs.
        #expect(withheld.reason == plain.reason && withheld.isTerminal == plain.isTerminal)
        guard case .retry(_, let detail, _) = withheld else {
            Issue.record("expected a retry, got \(withheld)")
            return
        }
        let text = detail["error"]?.stringValue ?? ""
        #expect(!text.contains(error.message) && !text.contains("refused") && !text.contains("resolve"))
        #expect(detail["origin"]?.stringValue == origin)
        guard case .retry(_, let plainDetail, _) = plain else { return }
        #expect(plainDetail["error"]?.stringValue?.contains(error.message) == true)
    }
}
