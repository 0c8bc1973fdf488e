import DeliveryCore
import Foundation
import Synchronization

/// Parsed `notifications.message` documents by notification id and row version (`xmin`).
///
/// A broadcast's thousands of deliveries share one message: the claim ships only the version, and the
/// message is read from PostgreSQL and parsed once per worker (Foundation's JSON parsing is the costliest
/// step of the per-delivery path, and shipping a large message with every claimed row costs memory and
/// bandwidth). Bounded by entries and by bytes of JSON; when either bound is reached it starts over.
public final class MessageCache: Sendable {
    /// Reads the stored messages of some notifications (one round trip).
    public typealias Loader = @Sendable ([UUID]) async throws -> [UUID: MessageStore.StoredMessage]

    /// Largest message document read, in bytes of JSON text. No provider payload exceeds 4 KB, so a bigger
    /// document can only be a mistake (say, a file pasted into `data`); its deliveries fail with
    /// `payload_too_large` without the document ever being transferred.
    public static let maximumMessageBytes = 262_144

    /// Why a delivery cannot use its message: the outcome to record.
    public struct Problem: Error, Sendable {
        public var outcome: DeliveryOutcome
    }

    private struct Entry {
        var version: String
        var result: Result<NotificationMessage, Problem>
    }

    private let load: Loader
    private let state: Mutex<ByteBoundedDictionary<UUID, Entry>>

    /// - Parameters:
    ///   - capacity: most messages kept.
    ///   - byteBudget: most bytes of message JSON kept (parsed messages take about as much).
    public init(load: @escaping Loader, capacity: Int = 4096, byteBudget: Int = 32 << 20) {
        self.load = load
        state = Mutex(ByteBoundedDictionary(capacity: capacity, byteBudget: byteBudget))
    }

    /// Reads, in one round trip by `read` on the caller's thread (the claim's database connection, so the
    /// read needs no hand-off of its own), the messages of a claimed batch that are not cached at their
    /// version. A failed read is left for ``message(for:version:)`` to try again and report per delivery.
    public func prefetch(
        _ keys: [(notificationID: UUID, version: String)], reading read: ([UUID]) throws -> [UUID: MessageStore.StoredMessage]
    ) {
        let missing: Set<UUID> = state.withLock { state in
            Set(keys.filter { state[$0.notificationID]?.version != $0.version }.map(\.notificationID))
        }
        guard !missing.isEmpty, let stored = try? read(Array(missing)) else { return }
        for (id, message) in stored { insert(id, message) }
    }

    /// The parsed message, or the outcome for a delivery that cannot use it: `failed` / `invalid_message`
    /// naming the bad field, `failed` / `payload_too_large` for an oversized document, or a `retry` that does
    /// not count as an attempt (`message_unavailable`) when the database could not be read.
    public func message(for notificationID: UUID, version: String) async -> Result<NotificationMessage, Problem> {
        if let entry = state.withLock({ $0[notificationID] }), entry.version == version {
            return entry.result
        }
        let stored: [UUID: MessageStore.StoredMessage]
        do {
            stored = try await load([notificationID])
        } catch {
            return .failure(Problem(outcome: .retry(reason: .messageUnavailable, detail: ["error": .string("\(error)")])))
        }
        guard let message = stored[notificationID] else {
            // The row was deleted after the claim (its queued deliveries are deleted with it).
            return .failure(Problem(outcome: .skipped(reason: .canceled, detail: ["note": "the notification row is gone"])))
        }
        return insert(notificationID, message)
    }

    @discardableResult
    private func insert(_ id: UUID, _ stored: MessageStore.StoredMessage) -> Result<NotificationMessage, Problem> {
        let result = Self.parse(stored)
        state.withLock {
            $0.store(Entry(version: stored.version, result: result), cost: max(stored.json?.utf8.count ?? 0, 64), forKey: id)
        }
        return result
    }

    static func parse(_ stored: MessageStore.StoredMessage) -> Result<NotificationMessage, Problem> {
        guard let json = stored.json else {
            return .failure(
                Problem(
                    outcome: .failed(
                        reason: .payloadTooLarge,
                        detail: [
                            "message_bytes": .int(Int64(stored.byteCount)), "limit": .int(Int64(maximumMessageBytes)),
                        ])))
        }
        do {
            return .success(try NotificationMessage(json: try JSONValue(parsing: json)))
        } catch let error as MessageError {
            return .failure(Problem(outcome: error.outcome))
        } catch {
            return .failure(
                Problem(outcome: .failed(reason: .invalidMessage, detail: ["error": "message is not valid JSON"])))
        }
    }
}
