import Foundation
import Postgres

/// The messages of claimed batches, read from `notifications` in one round trip per batch.
public enum MessageStore {
    /// A notification's message as stored: its row version, its size in bytes of JSON text, and the text
    /// itself unless it is larger than the limit asked for.
    public struct StoredMessage: Sendable {
        public var version: String
        public var byteCount: Int
        public var json: String?
    }

    /// Reads the messages of `notificationIDs` in one round trip; documents over `maximumBytes` of JSON text
    /// are measured but not transferred.
    public static func messages(
        on connection: PostgresConnection, notificationIDs: [UUID], maximumBytes: Int
    ) throws -> [UUID: StoredMessage] {
        // Planned on every call, not prepared: a prepared statement's generic plan is made from the statistics of
        // the moment, and one made while `notifications` was nearly empty can be a sequential scan, kept until an
        // autoanalyze, as the deliveries insert trigger's was (migration 0020). In the same stalls of make bench's
        // transactional section this read took 53 ms a claimed batch instead of 2-3.
        let rows = try connection.query(
            """
            SELECT id, xmin::text AS version, octet_length(text) AS size,
                   CASE WHEN octet_length(text) <= $2 THEN text END AS message
            FROM (SELECT id, xmin, message::text AS text
                  FROM notifications WHERE id = ANY($1::uuid[])
                  -- Not pulled up, so each document is written as text once (not once for its size and again).
                  OFFSET 0) AS n
            """, [notificationIDs, maximumBytes])
        var result: [UUID: StoredMessage] = [:]
        for row in rows {
            result[try row.decode(UUID.self, "id")] = StoredMessage(
                version: try row.decode(String.self, "version"), byteCount: try row.decode(Int.self, "size"),
                json: try row.decodeIfPresent(String.self, "message"))
        }
        return result
    }
}
