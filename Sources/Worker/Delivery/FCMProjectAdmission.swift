import DeliveryCore
import Foundation

/// Which sends of an FCM batch their projects' fleet-wide buckets admit (docs/fcm.md, "Project quota"): a value
/// computed from the batch's projects and the grants of one charge, tested without a database or sockets.
///
/// Each project's sends are admitted in batch order (the claim's order: priority, then due time) up to what its
/// bucket granted; the rest are held back unsent, each until the bucket's refill reaches its place
/// (``FCMProjectGrant/nextPermit(forHeld:)``), so a backlog comes back spread over the refill rather than all at
/// the next permit. Sends whose project is unknown (the channel's settings cannot be read: the send fails on its
/// own) are admitted and charged nothing.
struct FCMProjectAdmission: Equatable {
    /// Indexes of the batch to send, in batch order.
    var admitted: [Int] = []
    /// Indexes of the batch held back, with the instant each comes back (the database's clock).
    var held: [(index: Int, until: Date)] = []

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.admitted == rhs.admitted && lhs.held.map(\.index) == rhs.held.map(\.index)
            && lhs.held.map(\.until) == rhs.held.map(\.until)
    }

    /// The sends to charge: each project named by the batch with how many of its sends it holds, in first-seen order.
    static func asks(projects: [String?]) -> [(project: String, sends: Int)] {
        var order: [String] = []
        var counts: [String: Int] = [:]
        for case let project? in projects {
            if counts[project] == nil { order.append(project) }
            counts[project, default: 0] += 1
        }
        return order.map { ($0, counts[$0]!) }
    }

    /// - Parameters:
    ///   - projects: each send's project, by batch index (nil: unknown).
    ///   - grants: the charge's grants; a project without one (the charge failed) holds all its sends until `retry`.
    ///   - retry: when sends of a project without a grant come back.
    init(projects: [String?], grants: [FCMProjectGrant], retry: Date) {
        var byProject: [String: FCMProjectGrant] = [:]
        for grant in grants { byProject[grant.project] = grant }
        var seen: [String: Int] = [:]
        for (index, project) in projects.enumerated() {
            guard let project else {
                admitted.append(index)
                continue
            }
            let position = seen[project, default: 0]
            seen[project] = position + 1
            guard let grant = byProject[project] else {
                held.append((index, retry))
                continue
            }
            if position < grant.granted {
                admitted.append(index)
            } else {
                held.append((index, grant.nextPermit(forHeld: position - grant.granted)))
            }
        }
    }

    /// The outcome of a held send: a retry that spends no attempt and writes no event
    /// (``CompletionFactory/projectQuotaReason``).
    static func heldOutcome(until: Date) -> DeliveryOutcome {
        .retry(reason: CompletionFactory.projectQuotaReason, notBefore: until)
    }
}
