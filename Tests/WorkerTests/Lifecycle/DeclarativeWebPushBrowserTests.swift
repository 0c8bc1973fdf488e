import DeliveryCore
import Emulator
import Foundation
import Metrics
import MetricsServer
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// The Declarative Web Push JSON the worker sends, as a browser's service worker receives it: the worker sends the
/// form to the emulator (which decrypts it), and those exact bytes are delivered as a push message to a service
/// worker in Debian's headless `chromium`, through the DevTools protocol's `ServiceWorker.deliverPushMessage` (the
/// browser's own push event dispatch; Chromium's push service itself is Google's and cannot be pointed at the
/// emulator). Chromium does not display a declarative push by itself, as WebKit does ("Meet Declarative Web Push"):
/// what this shows is that a service worker elsewhere still gets it as an ordinary push, reads it as JSON and can
/// change it before showing it, as a `mutable` one lets it.
@Suite("Declarative Web Push in a service worker", .serialized)
struct DeclarativeWebPushBrowserTests {
    /// The page: registers the service worker, says so in its title, and writes what the worker posts back into
    /// `#out`.
    static let page = """
        <!doctype html><html><head><meta charset="utf-8"><title>waiting</title></head><body><pre id="out">waiting</pre>
        <script>
        navigator.serviceWorker.onmessage = (event) => {
          document.getElementById('out').textContent = JSON.stringify(event.data);
          document.title = 'pushed';
        };
        navigator.serviceWorker.register('/sw.js').then(() => navigator.serviceWorker.ready)
          .then(() => { document.title = 'registered'; })
          .catch((error) => { document.title = 'failed: ' + error; });
        </script></body></html>
        """

    /// The service worker: reads the push as JSON, changes the title and adds to the data as a page's worker
    /// would (a count of unread orders), and posts what it read and made to every window of its origin.
    static let serviceWorker = """
        self.addEventListener('install', (event) => { self.skipWaiting(); });
        self.addEventListener('activate', (event) => { event.waitUntil(self.clients.claim()); });
        self.addEventListener('push', (event) => {
          const message = event.data.json();
          const shown = message.notification;
          shown.title = shown.title + ' (2 unread)';
          shown.data = Object.assign({}, shown.data, {unread: 2});
          const report = {
            web_push: message.web_push, title: shown.title, body: shown.body, lang: shown.lang,
            navigate: shown.navigate, mutable: shown.mutable, order: shown.data.data.order, unread: shown.data.unread,
            bytes: event.data.arrayBuffer().byteLength
          };
          event.waitUntil(self.clients.matchAll({includeUncontrolled: true, type: 'window'})
            .then((windows) => windows.forEach((w) => w.postMessage(report))));
        });
        """

    @Test func aServiceWorkerReadsAndChangesTheDeclarativeJSONTheWorkerSent() async throws {
        guard let chromium = findExecutable("chromium") else {
            Issue.record("chromium is not installed (scripts/install-deps.sh installs it: apt-get install chromium)")
            return
        }
        // 1. What the worker sends: the declarative form, encrypted to the emulator, which decrypts it.
        let plaintext: [UInt8] = try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                try await onThread {
                    let seed = try Seed(url)
                    try seed.app(defaultLanguage: "en")
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings(declarative: "always"))
                    let user = try seed.user("kemal")
                    try seed.webSubscription(try emulator.webSubscription("okay1"), origin: emulator.endpoint, user: user, language: "tr")
                    _ = try seed.notification(
                        message: #"{"headings": {"en": "Hello", "tr": "Merhaba"}, "contents": {"en": "Shipped", "tr": "Yola çıktı"}, "url": "https://shop.example/orders/42", "data": {"order": 42}}"#,
                        target: #"{"include_external_ids": ["kemal"]}"#)
                }
                let runtime = try WorkerRuntime(configuration: try emulator.workerConfiguration(databaseURL: url), logger: quietLogger)
                try await runUntilDrained(runtime)
                return try #require(emulator.webPush.acceptedMessages.first).plaintext
            }
        }
        let sent = try JSONValue(parsing: plaintext)
        #expect(sent["web_push"] == 8030 && sent["notification"]?["title"] == "Merhaba")

        // 2. The page and its service worker on loopback (a potentially trustworthy origin: service workers allowed).
        let port = try freePort()
        let server = try MetricsHTTPServer(
            address: try MetricsListenAddress(parsing: "127.0.0.1:\(port)"), registry: MetricsRegistry(),
            pages: [
                "/": { ListenerPage(status: 200, contentType: "text/html; charset=utf-8", body: Self.page) },
                "/sw.js": { ListenerPage(status: 200, contentType: "text/javascript; charset=utf-8", body: Self.serviceWorker) },
            ])
        let origin = "http://127.0.0.1:\(port)"

        // 3. The push, delivered by the browser to the registered worker.
        let browser = try DevToolsPipe(chromium: chromium)
        let report: String = try await onThread {
            defer { browser.close() }
            let target = try #require(try browser.call("Target.createTarget", ["url": .string(origin + "/")])["targetId"])
            let attached = try browser.call("Target.attachToTarget", ["targetId": target, "flatten": true])
            let session = try #require(attached["sessionId"]?.stringValue)
            func evaluate(_ expression: String) throws -> String {
                try browser.call("Runtime.evaluate", ["expression": .string(expression), "returnByValue": true], session: session)[
                    "result"]?["value"]?.stringValue ?? ""
            }
            // Until the page has loaded and its worker is active (or refused). Hang guard: the browser is killed after
            // 2 minutes, which ends any wait here.
            var title = try evaluate("document.title")
            while title != "registered" && !title.hasPrefix("failed") {
                Thread.sleep(forTimeInterval: 0.05)
                title = try evaluate("document.title")
            }
            try #require(title == "registered", "the service worker was not registered: \(title)")
            _ = try browser.call("ServiceWorker.enable", [:], session: session)
            let registration = try browser.waitForEvent("ServiceWorker.workerRegistrationUpdated") { params in
                params["registrations"]?.arrayValue?.first { $0["scopeURL"]?.stringValue == origin + "/" && $0["isDeleted"] == false }
            }
            let registrationID = try #require(registration["registrationId"])
            _ = try browser.call(
                "ServiceWorker.deliverPushMessage",
                ["origin": .string(origin), "registrationId": registrationID, "data": .string(String(decoding: plaintext, as: UTF8.self))],
                session: session)
            while try evaluate("document.title") != "pushed" { Thread.sleep(forTimeInterval: 0.05) }
            return try evaluate("document.getElementById('out').textContent")
        }
        await server.shutdown()
        let read = try JSONValue(parsing: Array(report.utf8))
        #expect(read["web_push"] == 8030, "\(report)")
        #expect(read["title"] == "Merhaba (2 unread)")
        #expect(read["body"] == "Yola çıktı" && read["lang"] == "tr")
        #expect(read["navigate"] == "https://shop.example/orders/42")
        #expect(read["mutable"] == true && read["order"] == "42" && read["unread"] == 2)
        #expect(read["bytes"]?.int64Value == Int64(plaintext.count), "the worker's bytes, whole")
    }
}

/// Headless `chromium` driven through the DevTools protocol over `--remote-debugging-pipe`: JSON messages ending in
/// a NUL byte, commands on the browser's descriptor 3 and answers and events on its descriptor 4 (a shell joins them
/// to this process's pipes). Blocking: call from a thread that may block (`onThread`). The browser has a profile of
/// its own (deleted on ``close()``), fetches nothing but what it is sent to (no background networking, component
/// updates, sync or default apps) and is killed after 2 minutes, whatever it is doing.
final class DevToolsPipe: @unchecked Sendable {
    struct ProtocolError: Error, CustomStringConvertible {
        var description: String
    }

    private let process = Process()
    private let commands = Pipe()
    private let answers = Pipe()
    private let profile: URL
    private var buffer: [UInt8] = []
    private var nextID = 0
    /// Events read while waiting for an answer, in order.
    private var events: [JSONValue] = []
    private let killer: Task<Void, Never>

    init(chromium: String) throws {
        profile = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-chromium-\(UUID().uuidString.prefix(8))")
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", #"exec "$@" 3<&0 4>&1 </dev/null >/dev/null"#, "sh", chromium,
            "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile.path)", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
            "--remote-debugging-pipe", "about:blank",
        ]
        process.standardInput = commands
        process.standardOutput = answers
        process.standardError = FileHandle.nullDevice
        try process.run()
        killer = Task { [process] in
            try? await Task.sleep(for: .seconds(120))
            if process.isRunning { process.terminate() }
        }
    }

    /// Sends `method` with `params` (to `session`'s target when given) and returns the answer's `result`.
    /// - Throws: ``ProtocolError`` for an error answer or a browser that went away.
    func call(_ method: String, _ params: [String: JSONValue], session: String? = nil) throws -> JSONValue {
        nextID += 1
        let id = nextID
        var message: [String: JSONValue] = ["id": .int(Int64(id)), "method": .string(method), "params": .object(params)]
        if let session { message["sessionId"] = .string(session) }
        commands.fileHandleForWriting.write(Data(JSONValue.object(message).serialized() + [0]))
        while true {
            let answer = try read()
            guard answer["id"]?.int64Value == Int64(id) else {
                if answer["method"] != nil { events.append(answer) }
                continue
            }
            if let error = answer["error"] { throw ProtocolError(description: "\(method): \(error)") }
            return answer["result"] ?? .object([:])
        }
    }

    /// The first event `method` (already read, or read next) for which `match` finds something; that something.
    func waitForEvent(_ method: String, _ match: (JSONValue) -> JSONValue?) throws -> JSONValue {
        var index = 0
        while true {
            while index < events.count {
                let event = events[index]
                index += 1
                if event["method"]?.stringValue == method, let found = match(event["params"] ?? .null) { return found }
            }
            let event = try read()
            if event["method"] != nil { events.append(event) }
        }
    }

    /// The next message.
    private func read() throws -> JSONValue {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let message = Array(buffer[..<end])
                buffer.removeSubrange(...end)
                return try JSONValue(parsing: message)
            }
            let more = answers.fileHandleForReading.availableData
            guard !more.isEmpty else { throw ProtocolError(description: "the browser closed its end of the pipe") }
            buffer += more
        }
    }

    func close() {
        killer.cancel()
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: profile)
    }
}
