extension APNsRequestFactory {
    /// The request for a certificate-based connection: the same as ``makeRequest(_:bearerToken:)`` without the
    /// `authorization` header (Apple, "Establishing a certificate-based connection to APNs": trust is
    /// established by the TLS client certificate, and requests carry no authentication token).
    /// - Throws: what ``makeRequest(_:bearerToken:)`` throws, except `invalid_provider_token`.
    public static func makeCertificateRequest(_ delivery: APNsDelivery) throws(APNsRequestError) -> PushRequest {
        var request = try makeRequest(delivery, bearerToken: "certificate")
        request.headers.removeAll { $0.name == "authorization" }
        return request
    }
}
