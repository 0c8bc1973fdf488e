import Foundation
import Postgres
import Providers

/// The `provider_tokens` table (migrations/0007_provider_tokens.sql): one row per credential fingerprint
/// with the sealed token, its generation, `issued_at` and `expires_at`.
enum ProviderTokenStore {
    /// A mint's own error (not the database's), carried out of the transaction.
    struct MintFailure: Error {
        var underlying: any Error
    }

    /// In one transaction: waits (at most `lockTimeout`) for the credential's advisory lock, reads
    /// its row, and returns the row's token when ``ProviderTokenPolicy/decide(current:rejected:at:)`` says
    /// to use it; otherwise writes `offered` (a still-fresh token this worker minted alone) or a new one
    /// from `mint`, conditionally on the generation read (compare-and-swap), and returns it. A row this
    /// credential cannot open (sealed by another key) counts as none and is replaced.
    /// - Throws: ``MintFailure`` wrapping `mint`'s error; `PostgresError` otherwise (SQLSTATE `55P03` when
    ///   the lock wait timed out).
    static func coordinate(
        on connection: PostgresConnection, credential: ProviderTokenCredential, policy: ProviderTokenPolicy,
        rejected: String?, offered: SharedProviderToken?, lockTimeout: Duration, now: () -> Date,
        mint: () throws -> MintedProviderToken
    ) throws -> SharedProviderToken {
        try connection.transaction { connection in
            _ = try connection.query(
                "SELECT set_config('lock_timeout', $1, true)", ["\(max(Int(lockTimeout / .milliseconds(1)), 1))ms"])
            _ = try connection.query(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", ["pushizo.provider_tokens/" + credential.fingerprint])
            let (row, generation) = try read(on: connection, credential)
            let at = now()
            if let row, policy.decide(current: row, rejected: rejected, at: at) == .use { return row }
            let next: MintedProviderToken
            if let offered, offered.token != rejected, policy.isFresh(offered, at: at) {
                next = MintedProviderToken(token: offered.token, issuedAt: offered.issuedAt, expiresAt: offered.expiresAt)
            } else {
                do { next = try mint() } catch { throw MintFailure(underlying: error) }
            }
            let written = try connection.query(
                """
                INSERT INTO provider_tokens AS p (fingerprint, kind, sealed_token, generation, issued_at, expires_at)
                VALUES ($1, $2, $3, 1, $4, $5)
                ON CONFLICT (fingerprint) DO UPDATE
                   SET kind = EXCLUDED.kind, sealed_token = EXCLUDED.sealed_token, generation = p.generation + 1,
                       issued_at = EXCLUDED.issued_at, expires_at = EXCLUDED.expires_at, updated_at = now()
                 WHERE p.generation = $6
                RETURNING generation
                """,
                [credential.fingerprint, credential.kind.rawValue, try credential.seal(next.token), next.issuedAt, next.expiresAt, generation])
            guard let newGeneration = try written.first?.decode(Int64.self, "generation") else {
                // Replaced meanwhile by a writer that did not take the lock: theirs wins.
                let (theirs, _) = try read(on: connection, credential)
                return theirs ?? SharedProviderToken(token: next.token, generation: 0, issuedAt: next.issuedAt, expiresAt: next.expiresAt)
            }
            return SharedProviderToken(token: next.token, generation: newGeneration, issuedAt: next.issuedAt, expiresAt: next.expiresAt)
        }
    }

    /// The credential's row: its token when this credential can open it, and its generation (0: no row).
    static func read(on connection: PostgresConnection, _ credential: ProviderTokenCredential) throws
        -> (SharedProviderToken?, Int64)
    {
        let rows = try connection.query(
            "SELECT sealed_token, generation, issued_at, expires_at FROM provider_tokens WHERE fingerprint = $1",
            [credential.fingerprint])
        guard let row = rows.first else { return (nil, 0) }
        return (try token(in: row, for: credential), try row.decode(Int64.self, "generation"))
    }

    /// The current rows of `credentials`, in one statement and without any lock (a claim's read of the tokens
    /// its batch will carry, ``SharedProviderTokens/prefetch(_:reading:)``): the tokens by fingerprint, less
    /// the rows missing and those a credential cannot open (sealed by another key).
    static func current(on connection: PostgresConnection, _ credentials: [ProviderTokenCredential]) throws
        -> [String: SharedProviderToken]
    {
        guard !credentials.isEmpty else { return [:] }
        let byFingerprint = Dictionary(credentials.map { ($0.fingerprint, $0) }, uniquingKeysWith: { first, _ in first })
        let rows = try connection.query(
            """
            SELECT fingerprint, sealed_token, generation, issued_at, expires_at
              FROM provider_tokens WHERE fingerprint = ANY($1::text[])
            """,
            [Array(byFingerprint.keys)])
        var tokens: [String: SharedProviderToken] = [:]
        for row in rows {
            let fingerprint = try row.decode(String.self, "fingerprint")
            if let credential = byFingerprint[fingerprint], let token = try token(in: row, for: credential) {
                tokens[fingerprint] = token
            }
        }
        return tokens
    }

    /// The token of a `provider_tokens` row (`sealed_token`, `generation`, `issued_at`, `expires_at`), `nil`
    /// when `credential` cannot open it.
    private static func token(in row: PostgresRow, for credential: ProviderTokenCredential) throws -> SharedProviderToken? {
        guard let token = credential.open(try row.decode([UInt8].self, "sealed_token")) else { return nil }
        return SharedProviderToken(
            token: token, generation: try row.decode(Int64.self, "generation"),
            issuedAt: try row.decode(Date.self, "issued_at"), expiresAt: try row.decode(Date.self, "expires_at"))
    }
}
