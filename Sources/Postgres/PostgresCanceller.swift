internal import CLibPQ

/// Asks the server to cancel whatever statement a ``PostgresConnection`` is running, from any thread (libpq
/// docs §34.7 "Canceling Queries in Progress": `PQcancel` is thread-safe, unlike the connection itself).
///
/// A cancelled statement fails on the connection's own thread with SQLSTATE `57014` (`query_canceled`); the
/// connection stays usable. A request that arrives when nothing runs does nothing, and one racing the
/// statement's end may cancel the connection's next statement, so cancel only what you are about to abandon.
///
/// Sendable without a lock: the handle is never changed after `init`, `PQcancel` may be called on it from
/// several threads at once (libpq docs: "PQcancel can safely be invoked from a signal handler"), and `deinit`
/// runs only once no thread holds the canceller.
public final class PostgresCanceller: @unchecked Sendable {
    /// The `PGcancel` handle: its own copy of the server address and backend key, independent of the
    /// connection's life; freed in `deinit`.
    private let handle: OpaquePointer

    init?(conn: OpaquePointer) {
        guard let cancel = PQgetCancel(conn) else { return nil }
        handle = cancel
    }

    deinit {
        PQfreeCancel(handle)
    }

    /// Sends the cancel request (a new, short connection to the server; blocks until it is sent).
    /// - Returns: whether the request was sent; the server may still finish the statement first.
    @discardableResult
    public func cancel() -> Bool {
        // libpq writes an error text of at most this many bytes; it names no secret.
        var error = [CChar](repeating: 0, count: 256)
        return PQcancel(handle, &error, Int32(error.count)) == 1
    }
}
