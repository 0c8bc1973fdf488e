// swift-tools-version:6.0
// pushizo-worker: the Pushizo delivery worker. Only the toolchain and Foundation are used as Swift code;
// PostgreSQL, HTTP/2 and TLS come from Debian's C libraries through the system-library targets below.
import PackageDescription

let package = Package(
    name: "pushizo-worker",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "pushizo-worker", targets: ["pushizo-worker"]),
        .executable(name: "pushizo-bench", targets: ["pushizo-bench"]),
    ],
    targets: [
        // MARK: C libraries
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // sd_notify(3) and sd_watchdog_enabled(3): readiness, status and the watchdog under systemd.
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        // The HTTP/1.1 server of the Prometheus metrics listener.
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        // The Public Suffix List (built into libpsl): registrable domains, by which the resolver shares its threads.
        .systemLibrary(name: "CLibPSL", pkgConfig: "libpsl", providers: [.apt(["libpsl-dev"])]),
        // The HTTP client of webhook deliveries (libcurl's multi interface, OpenSSL flavour: HTTP/1.1 and HTTP/2).
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // Functions standing in for C macros and variadic calls, which Swift cannot call: one target per library.
        .target(name: "CPushizoOpenSSLShims", dependencies: ["COpenSSL"]),
        .target(name: "CPushizoMicroHTTPDShims", dependencies: ["CMicroHTTPD"]),
        .target(name: "CPushizoCurlShims", dependencies: ["CCurl"]),
        // epoll, eventfd, accept4, mallopt, pthread_setname_np and the signal-forwarding handler.
        .target(name: "CPushizoGlibcShims"),

        // MARK: The build's version (VERSION) and git commit, written before every build by an in-repo plugin.
        .plugin(name: "BuildInfoPlugin", capability: .buildTool()),
        .target(name: "BuildInfo", plugins: ["BuildInfoPlugin"]),

        // MARK: Wrappers over C (C types never leave these modules)
        .target(name: "UUIDText"),
        .target(name: "Postgres", dependencies: ["CLibPQ", "UUIDText"]),
        .target(name: "HTTP2", dependencies: ["CNghttp2", "COpenSSL", "CPushizoOpenSSLShims", "CPushizoGlibcShims", "CLibPSL"]),
        .target(name: "PushCrypto", dependencies: ["COpenSSL", "CPushizoOpenSSLShims"]),
        // Requests to untrusted HTTP endpoints (webhook receivers) on libcurl, under the egress policy of HTTP2.
        .target(name: "CurlHTTP", dependencies: ["CCurl", "CPushizoCurlShims", "HTTP2"]),

        // MARK: Logic without I/O
        .target(name: "DeliveryCore", dependencies: ["UUIDText"]),
        .target(name: "Providers", dependencies: ["DeliveryCore", "PushCrypto", "UUIDText"]),
        // Standard Webhooks signing and the webhook batches' JSON.
        .target(name: "Webhooks", dependencies: ["PushCrypto"]),
        // Prometheus metric families and their text rendering.
        .target(name: "Metrics"),

        // MARK: I/O owners
        // The `GET /metrics` listener (libmicrohttpd on its own thread) and the process_* collector.
        .target(name: "MetricsServer", dependencies: ["Metrics", "CMicroHTTPD", "CPushizoMicroHTTPDShims"]),
        .target(
            name: "Worker",
            dependencies: ["Postgres", "HTTP2", "PushCrypto", "DeliveryCore", "Providers", "CSystemd", "Metrics", "MetricsServer", "UUIDText", "CPushizoGlibcShims", "BuildInfo"]),
        .target(name: "Emulator", dependencies: ["HTTP2", "PushCrypto", "DeliveryCore", "UUIDText"]),
        // The client half of `make bench` (scripts/bench.sh).
        .executableTarget(name: "pushizo-bench", dependencies: ["HTTP2"]),
        .executableTarget(name: "pushizo-worker", dependencies: ["Worker", "Emulator", "Postgres", "HTTP2", "PushCrypto", "DeliveryCore", "Providers", "BuildInfo"]),

        // MARK: Tests (folders mirror Sources/)
        // Points the calling thread's resolver (glibc's `_res`, a macro) at a DNS server of the tests' own.
        .target(name: "CResolverTestSupport", path: "Tests/CResolverTestSupport"),
        // Free ports, raw TCP clients and a DNS server that never answers, shared by the test targets that start
        // servers.
        .target(name: "SocketTestSupport", dependencies: ["CResolverTestSupport"], path: "Tests/SocketTestSupport"),
        .testTarget(name: "UUIDTextTests", dependencies: ["UUIDText"]),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "SocketTestSupport"]),
        .testTarget(name: "MetricsTests", dependencies: ["Metrics"]),
        .testTarget(name: "MetricsServerTests", dependencies: ["MetricsServer", "Metrics"]),
        .testTarget(name: "HTTP2Tests", dependencies: ["HTTP2", "PushCrypto", "SocketTestSupport"]),
        .testTarget(name: "PushCryptoTests", dependencies: ["PushCrypto"]),
        .testTarget(name: "CurlHTTPTests", dependencies: ["CurlHTTP", "HTTP2", "Metrics", "MetricsServer", "SocketTestSupport"]),
        .testTarget(name: "WebhooksTests", dependencies: ["Webhooks"]),
        .testTarget(name: "DeliveryCoreTests", dependencies: ["DeliveryCore"]),
        .testTarget(name: "ProvidersTests", dependencies: ["Providers", "DeliveryCore", "PushCrypto"]),
        .testTarget(name: "EmulatorTests", dependencies: ["Emulator", "HTTP2", "PushCrypto", "Providers", "DeliveryCore"]),
        .testTarget(name: "BuildInfoTests", dependencies: ["BuildInfo"]),
        .testTarget(name: "WorkerTests", dependencies: ["Worker", "Emulator", "Postgres", "HTTP2", "PushCrypto", "DeliveryCore", "Providers", "SocketTestSupport", "BuildInfo", "Metrics", "MetricsServer"]),
    ],
    swiftLanguageModes: [.v6]
)
