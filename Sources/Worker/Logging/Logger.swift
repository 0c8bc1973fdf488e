import DeliveryCore
import Foundation
import Synchronization

/// A small structured logger writing one line per record to stderr, where systemd's journal picks it up.
///
/// Text lines start with a `<N>` syslog priority prefix (journald's `SyslogLevelPrefix=`) when stderr is the
/// journal (``JournalStream``), then the message and `key=value` fields; on a terminal or a pipe the prefix is
/// left out. JSON lines carry `level`, `message` and the fields, a field whose text is a JSON number written as
/// a number and `true` / `false` as booleans. Callers never pass secrets as fields.
public struct Logger: Sendable {
    /// Severity, ordered; numbers are syslog priorities (RFC 5424 §6.2.1).
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug = 7, info = 6, notice = 5, warning = 4, error = 3

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue > rhs.rawValue }

        public var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            }
        }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
            self = level
        }
    }

    public enum Format: String, Sendable { case text, json }

    public var minimumLevel: Level
    public var format: Format
    /// Component name added to every line (`worker`, `emulator`, ...).
    public var label: String
    /// Whether text lines start with the `<N>` priority prefix: when stderr is the journal's stream.
    public var priorityPrefix = JournalStream.stderrIsJournal

    public init(label: String, minimumLevel: Level = .info, format: Format = .text) {
        self.label = label
        self.minimumLevel = minimumLevel
        self.format = format
    }

    /// The same logger under another component name.
    public func named(_ label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    public func debug(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String] = [:]) {
        log(.debug, message(), fields())
    }
    public func info(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String] = [:]) {
        log(.info, message(), fields())
    }
    public func notice(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String] = [:]) {
        log(.notice, message(), fields())
    }
    public func warning(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String] = [:]) {
        log(.warning, message(), fields())
    }
    public func error(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String] = [:]) {
        log(.error, message(), fields())
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ fields: @autoclosure () -> [String: String]) {
        guard level >= minimumLevel else { return }
        let line = render(level, message(), fields())
        LogSink.shared.write(line)
    }

    func render(_ level: Level, _ message: String, _ fields: [String: String]) -> String {
        switch format {
        case .text:
            var line = (priorityPrefix ? "<\(level.rawValue)>" : "") + "\(label): \(message)"
            for key in fields.keys.sorted() {
                line += " \(key)=\(Self.quoteIfNeeded(fields[key] ?? ""))"
            }
            return line + "\n"
        case .json:
            var object = fields.mapValues(Self.jsonField)
            object["level"] = .string(level.name)
            object["message"] = .string(message)
            object["component"] = .string(label)
            object["time"] = .string(Date().formatted(.iso8601))
            return JSONValue.object(object).jsonText + "\n"
        }
    }

    /// A field's text as its JSON value: `true` and `false` as booleans, a number in JSON's grammar (RFC 8259 §6)
    /// of at most 32 characters as that number, anything else as a string.
    static func jsonField(_ text: String) -> JSONValue {
        if text == "true" || text == "false" { return .bool(text == "true") }
        if text.utf8.count <= 32, text.wholeMatch(of: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/) != nil {
            return .number(text)
        }
        return .string(text)
    }

    static func quoteIfNeeded(_ value: String) -> String {
        if value.isEmpty { return "\"\"" }
        if value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline }) {
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "\n", with: "\\n")
            return "\"\(escaped)\""
        }
        return value
    }
}

/// Serializes whole lines onto stderr so records from different threads never interleave.
final class LogSink: Sendable {
    static let shared = LogSink()
    private let lock = Mutex(())

    /// Writes with write(2) and drops what cannot be written: Foundation's `FileHandle.write(_:)` traps on an
    /// error, and a lost log line must not end the daemon (a closed journal stream gives `EPIPE`, a file past
    /// `RLIMIT_FSIZE` gives `EFBIG`, since SIGPIPE and SIGXFSZ are ignored).
    func write(_ line: String) {
        lock.withLock { _ in
            var bytes = Array(line.utf8)[...]
            while !bytes.isEmpty {
                let written = bytes.withUnsafeBytes { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count) }
                if written > 0 {
                    bytes = bytes.dropFirst(written)
                } else if written < 0, errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}

/// Lets a warning through once per cause and interval (a missing channel, an unreachable provider, an
/// unknown time zone name) rather than once per delivery.
public final class LogRateLimiter: Sendable {
    private let lastLogged = Mutex<[String: ContinuousClock.Instant]>([:])
    /// The least time between two lines for the same key.
    private let interval: Duration

    public init(interval: Duration) {
        self.interval = interval
    }

    /// Most keys remembered; past it the memory starts over (a flood of distinct causes may then log
    /// each again once, but memory stays bounded).
    public static let capacity = 10_000

    /// `true` when `key` was not let through during the last `interval`.
    public func allow(_ key: String) -> Bool {
        let now = ContinuousClock.now
        return lastLogged.withLock { lastLogged in
            if let last = lastLogged[key], now - last < interval { return false }
            if lastLogged.count >= Self.capacity { lastLogged.removeAll(keepingCapacity: true) }
            lastLogged[key] = now
            return true
        }
    }
}

/// Values from rows (zone names, reasons) as they may appear in a log line or a preview note.
public enum LogText {
    /// `text` cut to `limit` characters with `…`, so a hostile row cannot flood the journal.
    public static func shortened(_ text: String, limit: Int = 64) -> String {
        text.count <= limit ? text : String(text.prefix(limit)) + "…"
    }
}
