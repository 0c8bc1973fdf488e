import Foundation
import SocketTestSupport
import Synchronization
import Testing
@testable import HTTP2

@Suite("HTTP2 TLS failures and interoperability")
struct HTTP2TLSFailureTests {
    private func expectFailure(_ code: HTTP2Error.Code, trust: String, origin: HTTP2Origin, loop: HTTP2EventLoop) async {
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(trust)))
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/"), to: origin)
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.code == code && error.isSafeToRetry
        }
        await client.shutdown()
    }

    @Test func untrustedCertificateAndWrongHostNameAreRejected() async throws {
        let good = try LocalCertificateAuthority.generate(in: temporaryDirectory("good"), hostnames: ["localhost"])
        let other = try LocalCertificateAuthority.generate(in: temporaryDirectory("other"))
        let loop = try HTTP2EventLoop(name: "test-verify")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: TLSServerConfiguration(certificateChainFile: good.certificateChain,
                                                                                privateKeyFile: good.privateKey),
                                 handler: echoHandler)
        let port = try server.start()
        // Signed by a CA we do not trust.
        await expectFailure(.certificateVerificationFailed, trust: other.caCertificate,
                            origin: HTTP2Origin(scheme: .https, host: "localhost", port: port), loop: loop)
        // Trusted CA, but the certificate names only "localhost": no IP SAN for 127.0.0.1.
        await expectFailure(.certificateVerificationFailed, trust: good.caCertificate,
                            origin: HTTP2Origin(scheme: .https, host: "127.0.0.1", port: port), loop: loop)
        // The same CA and the right name work.
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(good.caCertificate)))
        #expect(try await client.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .https, host: "localhost", port: port)).status == 200)
        await client.shutdown()
        await server.shutdown()
    }

    @Test func aHostNameTheVerifierWouldReadDifferentlyNeverConnects() async throws {
        // "localhost\0.example" reads as "localhost" to every C-string API: resolved and checked as "localhost",
        // it would reach a server whose certificate names only localhost, verified against the wrong name. The
        // host parser refuses it before any lookup (first line); the TLS set-up refuses it too (test below).
        let files = try LocalCertificateAuthority.generate(in: temporaryDirectory("nul-host"), hostnames: ["localhost"])
        let loop = try HTTP2EventLoop(name: "test-nul-host")
        defer { loop.shutdown() }
        let reached = Atomic<Int>(0)
        let server = HTTP2Server(eventLoop: loop, tls: TLSServerConfiguration(certificateChainFile: files.certificateChain,
                                                                                privateKeyFile: files.privateKey)) { _ in
            reached.add(1, ordering: .relaxed)
            return HTTP2ServerResponse(status: 200)
        }
        let port = try server.start()
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(files.caCertificate)))
        await #expect {
            _ = try await client.send(HTTP2Request(path: "/"), to: HTTP2Origin(scheme: .https, host: "localhost\u{0}.example", port: port))
        } throws: { error in
            (error as? HTTP2Error)?.code == .forbiddenAddress
        }
        #expect(reached.load(ordering: .relaxed) == 0)
        await client.shutdown()
        await server.shutdown()
    }

    @Test(arguments: ["localhost\u{0}.example", ""])
    func theTLSSetUpRefusesAHostNameTheVerifierWouldReadDifferently(host: String) throws {
        // Below the host parser: SSL_set1_host gets the name with its explicit length, so an embedded NUL or an
        // empty name (which would switch the check off) fails the set-up instead of verifying something else.
        let files = try LocalCertificateAuthority.generate(in: temporaryDirectory("nul-host-tls"), hostnames: ["localhost"])
        let context = try TLSContext.client(TLSClientConfiguration(trustRoots: .pemFile(files.caCertificate)))
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let result = context.clientSession(fd: fds[0], host: host, origin: HTTP2Origin(scheme: .https, host: "localhost", port: 443))
        guard case .failure(let error) = result else {
            Issue.record("the TLS set-up accepted \(host.debugDescription)")
            return
        }
        #expect(error.code == .tlsHandshakeFailed && error.message.contains("SSL_set1_host") && error.isSafeToRetry)
    }

    @Test func clientCertificateAuthentication() async throws {
        let serverFiles = try LocalCertificateAuthority.generate(in: temporaryDirectory("mtls-server"))
        let clientFiles = try LocalCertificateAuthority.generate(in: temporaryDirectory("mtls-client"), hostnames: ["provider.example"])
        let loop = try HTTP2EventLoop(name: "test-mtls")
        defer { loop.shutdown() }
        let server = HTTP2Server(eventLoop: loop, tls: TLSServerConfiguration(
            certificateChainFile: serverFiles.certificateChain, privateKeyFile: serverFiles.privateKey,
            clientCertificateTrustFile: clientFiles.caCertificate)) { request in
            HTTP2ServerResponse(status: 200, body: Array((request.clientCertificateSubject ?? "none").utf8))
        }
        let port = try server.start()
        let origin = HTTP2Origin(scheme: .https, host: "localhost", port: port)
        // Identity from memory (as the worker loads APNs certificates from the database).
        let chain = Array(try Data(contentsOf: URL(fileURLWithPath: clientFiles.certificateChain)))
        let key = Array(try Data(contentsOf: URL(fileURLWithPath: clientFiles.privateKey)))
        let identity = TLSClientConfiguration.ClientIdentity.pem(certificateChain: chain, privateKey: key)
        #expect(!"\(identity)".contains("PRIVATE KEY"))
        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(serverFiles.caCertificate),
                                                                               clientIdentity: identity))
        let response = try await client.send(HTTP2Request(path: "/"), to: origin)
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self).contains("CN=provider.example"))
        await client.shutdown()
        // Without a certificate the server refuses the connection (TLS 1.3: an alert after the client's
        // handshake finished); the request was never sent.
        let anonymous = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(serverFiles.caCertificate)))
        await #expect {
            _ = try await anonymous.send(HTTP2Request(path: "/"), to: origin)
        } throws: { error in
            guard let error = error as? HTTP2Error else { return false }
            return error.isSafeToRetry && error.message.contains("certificate required")
        }
        await anonymous.shutdown()
        await server.shutdown()
    }

    @Test func serverWithoutALPNIsRefused() async throws {
        let files = try LocalCertificateAuthority.generate(in: temporaryDirectory("alpn"))
        let (openssl, port) = try await startListeningProcess("/usr/bin/openssl") {
            ["s_server", "-quiet", "-accept", "127.0.0.1:\($0)", "-cert", files.certificateChain, "-key", files.privateKey]
        }
        defer { openssl.stop() }
        let loop = try HTTP2EventLoop(name: "test-alpn")
        defer { loop.shutdown() }
        await expectFailure(.alpnNotNegotiated, trust: files.caCertificate,
                            origin: HTTP2Origin(scheme: .https, host: "127.0.0.1", port: port), loop: loop)
    }

    @Test func interoperatesWithNghttpd() async throws {
        let directory = temporaryDirectory("nghttpd")
        let files = try LocalCertificateAuthority.generate(in: directory + "/certs")
        let docroot = directory + "/www"
        try FileManager.default.createDirectory(atPath: docroot, withIntermediateDirectories: true)
        let content = Array((0..<200_000).map { UInt8(truncatingIfNeeded: $0 % 251) })
        try Data(content).write(to: URL(fileURLWithPath: docroot + "/blob.bin"))
        let loop = try HTTP2EventLoop(name: "test-nghttpd")
        defer { loop.shutdown() }

        // Cleartext h2c prior knowledge, then TLS with ALPN.
        let (plain, plainPort) = try await startListeningProcess("/usr/sbin/nghttpd") { ["-a", "127.0.0.1", "--no-tls", "-d", docroot, String($0)] }
        defer { plain.stop() }
        let (secure, tlsPort) = try await startListeningProcess("/usr/sbin/nghttpd") {
            ["-a", "127.0.0.1", "-d", docroot, String($0), files.privateKey, files.certificateChain]
        }
        defer { secure.stop() }

        let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(files.caCertificate)),
                                 configuration: .largeBodies)
        for origin in [HTTP2Origin(scheme: .http, host: "127.0.0.1", port: plainPort),
                       HTTP2Origin(scheme: .https, host: "localhost", port: tlsPort)] {
            let response = try await client.send(HTTP2Request(method: "GET", path: "/blob.bin"), to: origin)
            #expect(response.status == 200)
            // Compared apart from #expect, which would print both 200,000-byte arrays on a mismatch.
            let sameBody = response.body == content
            #expect(sameBody, "\(origin): \(response.body.count) bytes, expected \(content.count)")
            let missing = try await client.send(HTTP2Request(method: "GET", path: "/missing"), to: origin)
            #expect(missing.status == 404)
        }
        await client.shutdown()
    }
}
