import DeliveryCore
import Foundation

/// Whether this worker is ready for work (`GET /readyz`), decided without I/O from what the worker already
/// knows: the outcome of its loops' latest database round trips (the claim and expand loops report each one) and
/// the last judgement of the database's migrations (the start-up check's, then the owner's own by the same rule). A probe reads this value;
/// only when it is out of date (``checksDue(now:)``) does the probe's owner ask the database itself, at most
/// once per ``contactRecheck`` or ``schemaRecheck``, however often it is probed.
///
/// Ready when all hold: no stop was requested; the loops have reached the database and their latest round trip
/// (or the owner's own check, when the loops' news is older than ``staleAfter``) succeeded; the schema holds every
/// migration this build needs.
public struct ReadinessState: Sendable, Equatable {
    /// The database's schema as the start-up check judges it for this build (`WorkerSchema`, over the migrations the
    /// build was made with).
    public enum Schema: Sendable, Equatable {
        /// Not judged yet (the worker judges it at start, before its first claim).
        case unknown
        /// Every migration this build needs is applied (newer ones within the compatibility window allowed).
        case current
        /// Refused: behind this build or beyond its window, in the start-up check's words (naming the migrations and
        /// what to run), or the judgement failed (the bookkeeping table unreadable); free of secrets.
        case refused(String)
    }

    /// News of the database older than this is checked again before it is believed.
    public static let staleAfter: Duration = .seconds(30)
    /// The owner's own round trip, when the loops' news is stale, at most this often.
    public static let contactRecheck: Duration = .seconds(5)
    /// A current schema is judged again this often (a database restored from an older backup, a failover to a
    /// standby that lags behind a migration); one that is not current, or after a failed round trip, every
    /// ``contactRecheck``.
    public static let schemaRecheck: Duration = .seconds(60)

    /// The latest successful round trip (a loop's, or the owner's own check).
    public private(set) var lastSuccess: ContinuousClock.Instant?
    /// The latest failed one.
    public private(set) var lastFailure: ContinuousClock.Instant?
    /// Whether a loop of the worker has reached the database at least once (the owner's checks alone do not make
    /// the worker ready: it has not started work yet).
    public private(set) var loopsReachedDatabase = false
    public private(set) var schema: Schema
    /// The last attempt to compare the schema (paces the attempts).
    private var schemaCheckedAt: ContinuousClock.Instant?
    /// The last comparison that reached the database.
    private var schemaComparedAt: ContinuousClock.Instant?
    private var contactCheckedAt: ContinuousClock.Instant?
    /// A stop was requested: the worker finishes its sends and takes no new work.
    public var stopping = false

    public init() {
        schema = .unknown
    }

    /// A loop's round trip succeeded at `now`.
    public mutating func loopReached(at now: ContinuousClock.Instant) {
        loopsReachedDatabase = true
        lastSuccess = max(lastSuccess ?? now, now)
    }

    /// A loop's round trip failed at `now`.
    public mutating func loopFailed(at now: ContinuousClock.Instant) {
        lastFailure = max(lastFailure ?? now, now)
    }

    /// The owner's own round trip ended at `now`.
    public mutating func contactChecked(succeeded: Bool, at now: ContinuousClock.Instant) {
        contactCheckedAt = now
        if succeeded { lastSuccess = max(lastSuccess ?? now, now) } else { lastFailure = max(lastFailure ?? now, now) }
    }

    /// The owner compared the schema at `now`; nil: the database could not be reached, so what was known stands
    /// (the comparison is tried again as when it was not current).
    /// - Returns: the refusal's words when this comparison is the first to find it (the schema was current,
    ///   unknown or refused for another reason): what the owner logs once, so a refusal met while running is seen in
    ///   the log and not only in the probe's answer; nil otherwise.
    @discardableResult
    public mutating func schemaChecked(_ schema: Schema?, at now: ContinuousClock.Instant) -> String? {
        schemaCheckedAt = now
        guard let schema else { return nil }
        schemaComparedAt = now
        let previous = self.schema
        self.schema = schema
        if case .refused(let reason) = schema, previous != schema { return reason }
        return nil
    }

    /// What the owner should ask the database before answering a probe at `now`.
    public struct Checks: Sendable, Equatable {
        /// A round trip of its own: the loops' news is older than ``staleAfter``.
        public var contact: Bool
        /// A comparison of the applied migrations with the files.
        public var schema: Bool

        public var any: Bool { contact || schema }
    }

    public func checksDue(now: ContinuousClock.Instant) -> Checks {
        guard !stopping else { return Checks(contact: false, schema: false) }
        // Before the loops' first round trip there is nothing stale to confirm.
        let latest = [lastSuccess, lastFailure].compactMap { $0 }.max()
        let contact = loopsReachedDatabase && latest.map { now - $0 >= Self.staleAfter } ?? false
            && contactCheckedAt.map { now - $0 >= Self.contactRecheck } ?? true
        let schemaDue: Bool
        switch schema {
        case .unknown:
            // The start-up check judges it first (or the worker exits).
            schemaDue = false
        case .current:
            // A round trip failed since the last comparison (an outage, perhaps a failover to another server): the
            // next comparison comes as soon as for a schema not known to be current.
            let failedSince = lastFailure.map { failure in schemaComparedAt.map { failure >= $0 } ?? true } ?? false
            schemaDue = schemaCheckedAt.map { now - $0 >= (failedSince ? Self.contactRecheck : Self.schemaRecheck) } ?? true
        case .refused:
            schemaDue = schemaCheckedAt.map { now - $0 >= Self.contactRecheck } ?? true
        }
        return Checks(contact: contact, schema: schemaDue)
    }

    /// The verdict at `now`: ready, or the reasons it is not (one line each, plain text, no secrets).
    public func verdict(now: ContinuousClock.Instant) -> ProbeVerdict {
        var reasons: [String] = []
        if stopping { reasons.append("stopping: finishing in-flight sends, no new work") }
        if !loopsReachedDatabase {
            reasons.append(
                lastFailure == nil
                    ? "database: not reached yet" : "database: not reached yet; the last attempt failed \(ago(lastFailure, now)) ago")
        } else if let failure = lastFailure, failure > (lastSuccess ?? failure - .seconds(1)) {
            reasons.append("database: unreachable; the last round trip failed \(ago(failure, now)) ago, the last success was \(ago(lastSuccess, now)) ago")
        } else if let success = lastSuccess, now - success >= Self.staleAfter {
            reasons.append("database: no round trip for \(ago(success, now))")
        }
        switch schema {
        case .current:
            break
        case .unknown:
            reasons.append("migrations: not checked yet (the worker checks them before its first claim)")
        case .refused(let reason):
            reasons.append("migrations: \(reason)")
        }
        return reasons.isEmpty ? .healthy : .failing(reasons)
    }

    private func ago(_ instant: ContinuousClock.Instant?, _ now: ContinuousClock.Instant) -> String {
        guard let instant else { return "never" }
        let seconds = max(0, (now - instant).inSeconds)
        return seconds < 10 ? String(format: "%.1f s", seconds) : "\(Int(seconds)) s"
    }
}

/// A probe's answer (`/healthz`, `/readyz`): healthy, or failing with the reasons, one line each.
public enum ProbeVerdict: Sendable, Equatable {
    case healthy
    case failing([String])

    /// The plain-text body: `ok`, or each reason on a line of its own.
    public var body: String {
        switch self {
        case .healthy: "ok\n"
        case .failing(let reasons): reasons.map { $0 + "\n" }.joined()
        }
    }

    /// 200 when healthy, 503 (Service Unavailable, RFC 9110 §15.6.4) otherwise: what Kubernetes' HTTP probes and
    /// load balancers' health checks read.
    public var httpStatus: Int {
        if case .healthy = self { return 200 }
        return 503
    }
}
