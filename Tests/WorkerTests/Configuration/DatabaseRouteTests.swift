import Postgres
import Testing
@testable import Worker

@Suite("PUSHIZO_DATABASE_POOLER and PUSHIZO_LISTEN_DATABASE_URL")
struct DatabaseRouteTests {
    static func route(_ environment: [String: String]) throws -> DatabaseRoute {
        let reader = try ConfigurationReader(
            environment: ["PUSHIZO_DATABASE_URL": "host=db"].merging(environment) { _, new in new }, arguments: [],
            keys: WorkerConfiguration.keys)
        return try WorkerConfiguration(reader).databaseRoute
    }

    @Test func withoutAPoolerOrInSessionModeListenGoesTheSameWay() throws {
        #expect(try Self.route([:]) == DatabaseRoute(poolerMode: .none, listenURL: "host=db"))
        #expect(try Self.route(["PUSHIZO_DATABASE_POOLER": "session"]) == DatabaseRoute(poolerMode: .session, listenURL: "host=db"))
    }

    @Test func inTransactionModeListenNeedsItsOwnURLOrThereIsNone() throws {
        #expect(try Self.route(["PUSHIZO_DATABASE_POOLER": "transaction"]) == DatabaseRoute(poolerMode: .transaction, listenURL: nil))
        let direct = try Self.route(["PUSHIZO_DATABASE_POOLER": "transaction", "PUSHIZO_LISTEN_DATABASE_URL": "host=primary"])
        #expect(direct.listenURL == "host=primary")
        #expect(direct.summary.contains("PUSHIZO_LISTEN_DATABASE_URL"))
        #expect(try Self.route(["PUSHIZO_DATABASE_POOLER": "transaction"]).summary.contains("polling only"))
    }

    @Test func statementModeAndUnknownModesAreRefusedNamingTheKey() throws {
        for mode in ["statement", "bouncy"] {
            let error = try #require(throws: ConfigurationError.self) { try Self.route(["PUSHIZO_DATABASE_POOLER": mode]) }
            #expect(error.key == "PUSHIZO_DATABASE_POOLER")
        }
    }

    @Test func aPoolerSeenWhereNoneIsConfiguredIsRefused() throws {
        let none = DatabaseRoute(poolerMode: .none, listenURL: "host=db")
        #expect(none.databaseRefusal(announcedProcessID: 42, serverProcessID: 42) == nil)
        #expect(none.databaseRefusal(announcedProcessID: -1_234_567, serverProcessID: 42)?.key == "PUSHIZO_DATABASE_POOLER")
        let transaction = DatabaseRoute(poolerMode: .transaction, listenURL: "host=bouncer")
        #expect(transaction.databaseRefusal(announcedProcessID: -1_234_567, serverProcessID: 42) == nil)
        #expect(transaction.listenRefusal(announcedProcessID: 42, serverProcessID: 42) == nil)
        #expect(transaction.listenRefusal(announcedProcessID: -1_234_567, serverProcessID: 42)?.key == "PUSHIZO_LISTEN_DATABASE_URL")
        // A session-mode pooler keeps LISTEN working on its route.
        let session = DatabaseRoute(poolerMode: .session, listenURL: "host=bouncer")
        #expect(session.listenRefusal(announcedProcessID: -1_234_567, serverProcessID: 42) == nil)
    }
}
