import Foundation
import HTTP2
import Postgres
import PushCrypto

/// The configuration's plain values as the I/O modules' types, mapped once at start-up by the runtime
/// (``WorkerRuntime``, `pushizo-worker run` and `check`).
extension WorkerConfiguration {
    /// Where provider connections may go: the public internet only, unless ``allowPrivateNetworks``.
    public var egressPolicy: EgressPolicy { EgressPolicy(allowsPrivateNetworks: allowPrivateNetworks) }

    /// The CAs provider connections trust: the PEM bundle ``caFile`` names, checked the way OpenSSL's trust-store
    /// loader will read it, or the system store.
    /// - Throws: ``ConfigurationError`` naming `PUSHIZO_CA_FILE` when the file cannot be read or does not parse as
    ///   PEM certificates (every TLS handshake would fail later, one delivery at a time).
    public func trustRoots() throws(ConfigurationError) -> TLSClientConfiguration.TrustRoots {
        guard let caFile else { return .system }
        let key = ConfigurationKey.caFile.name
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: caFile),
            attributes[.type] as? FileAttributeType == .typeRegular,
            let data = FileManager.default.contents(atPath: caFile)
        else {
            throw ConfigurationError(key: key, problem: "\(caFile) is not a readable file")
        }
        do {
            _ = try PEMCertificates.count(in: Array(data))
        } catch {
            throw ConfigurationError(key: key, problem: "\(caFile) is not a PEM certificate bundle: \(error.message)")
        }
        return .pemFile(caFile)
    }
}

extension DatabaseRoute {
    /// Checks `connection` (opened on `PUSHIZO_DATABASE_URL` or, with `listen`, on the `LISTEN` route):
    /// ``databaseRefusal(announcedProcessID:serverProcessID:)`` or ``listenRefusal(announcedProcessID:serverProcessID:)``
    /// with the process IDs the connection was answered with and runs as.
    /// - Throws: the refusal as a ``ConfigurationError``; ``PostgresError`` when the database does not answer.
    public func verify(_ connection: PostgresConnection, listen: Bool = false) throws {
        let server = try connection.serverProcessID()
        let refusal = listen
            ? listenRefusal(announcedProcessID: connection.processID, serverProcessID: server)
            : databaseRefusal(announcedProcessID: connection.processID, serverProcessID: server)
        if let refusal { throw refusal }
    }
}

extension PostgresPoolerMode {
    /// The Postgres module's mode for the configured pooler (the same three PgBouncer pool modes).
    public init(_ pooler: DatabasePooler) {
        switch pooler {
        case .none: self = .none
        case .session: self = .session
        case .transaction: self = .transaction
        }
    }
}
