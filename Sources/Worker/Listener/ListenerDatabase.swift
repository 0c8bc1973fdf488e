import Foundation
import Postgres

/// The metrics listener's own database session, for the status page's reads and the readiness probe's checks:
/// apart from the worker's pool, so a page being read never takes a connection the claims need, and at most one
/// such session per worker. Opened on first use and again after it broke; used by one caller at a time, on the
/// caller's thread (a listener connection's thread, never Swift's cooperative pool).
///
/// `@unchecked Sendable`: ``session`` is read and written only while ``lock`` is held, and the connection never
/// leaves the call that holds it.
final class ListenerDatabase: @unchecked Sendable {
    private let connectionString: String
    private let poolerMode: PostgresPoolerMode
    private let lock = NSLock()
    private var session: PostgresConnection?

    /// - Parameter connectionString: `PUSHIZO_DATABASE_URL` (its libpq `connect_timeout`, 10 s unless it sets one,
    ///   bounds a connect to an unreachable server).
    init(connectionString: String, poolerMode: PostgresPoolerMode) {
        self.connectionString = connectionString
        self.poolerMode = poolerMode
    }

    /// Runs `body` on the session, waiting for another caller's use to end.
    func withSession<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        return try use(body)
    }

    /// As ``withSession(_:)``, or nil at once when another caller is using the session (a probe answers from
    /// what it knows rather than wait behind a page's read).
    func withSessionIfFree<T>(_ body: (PostgresConnection) throws -> T) throws -> T? {
        guard lock.try() else { return nil }
        defer { lock.unlock() }
        return try use(body)
    }

    /// Closes the session (after the listener stopped).
    func close() {
        lock.lock()
        defer { lock.unlock() }
        session?.close()
        session = nil
    }

    /// Called with ``lock`` held.
    private func use<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let open = try session ?? PostgresConnection(
            connectionString: connectionString, applicationName: "pushizo-worker-listener", poolerMode: poolerMode)
        session = open
        defer {
            if open.isConnectionBad {
                open.close()
                session = nil
            }
        }
        return try body(open)
    }
}
