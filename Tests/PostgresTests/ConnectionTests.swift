import Foundation
import Testing
@testable import Postgres

@Suite("PostgresConnection: errors, redaction, transactions")
struct ConnectionTests {
    @Test func uniqueViolationCarriesSQLStateAndDetail() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                try c.execute("CREATE TABLE t (id int PRIMARY KEY, name text)")
                let inserted = try c.query("INSERT INTO t VALUES ($1, $2), ($3, $4)", [1, "a", 2, "b"])
                #expect(inserted.affectedRows == 2)
                let error = try #require(throws: PostgresError.self) {
                    try c.query("INSERT INTO t VALUES ($1, $2)", [1, "again"])
                }
                #expect(error.code == .queryFailed)
                #expect(error.sqlState == "23505")
                #expect(error.message.contains("t_pkey"))
                #expect(error.detail?.contains("already exists") == true)
                #expect(!error.isConnectionProblem)
                #expect(error.description.contains("23505"))
                // The connection stays usable after a statement error.
                #expect(!c.isConnectionBad)
                #expect(try c.query("SELECT count(*) AS n FROM t").first?.decode(Int.self, "n") == 2)
            }
        }
    }

    @Test func hintsAndSyntaxErrors() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            let noFunction = try #require(throws: PostgresError.self) { try c.query("SELECT no_such_function($1::int)", [1]) }
            #expect(noFunction.sqlState == "42883")
            #expect(noFunction.hint != nil)
            let syntax = try #require(throws: PostgresError.self) { try c.execute("SELEC 1") }
            #expect(syntax.sqlState == "42601")
            #expect(syntax.code == .queryFailed)
            // Multiple statements in execute; the failing one's error is reported.
            let second = try #require(throws: PostgresError.self) { try c.execute("SELECT 1; SELECT 1/0; SELECT 2") }
            #expect(second.sqlState == "22012")
        }
    }

    @Test(arguments: [
        "postgresql://pushizo:Sup3rS3cret@127.0.0.1:1/db?connect_timeout=5",
        "host=127.0.0.1 port=1 user=pushizo password=Sup3rS3cret dbname=db connect_timeout=5",
        "host=127.0.0.1 port=1 password='Sup3rS3cret' user=x",
        // libpq echoes the whole URI in some parse errors; the password must still not appear.
        "postgresql://pushizo:Sup3rS3cret@[::1/db",
        "postgresql://pushizo:Sup3rS3cret@localhost:notaport/db",
        "host=127.0.0.1 password=Sup3rS3cret port=1 bogus_option=1",
        // Passwords libpq reads whole although a naive pattern stops early: '#', '@', spaces, quotes, %-escapes.
        "postgresql://pushizo:Sup3r#S3cret@127.0.0.1:1/db",
        "postgresql://pushizo:Sup3r%23S3cret@127.0.0.1:1/db",
        "postgresql://pushizo@127.0.0.1:1/db?password=Sup3r%20S3cret%27%22",
        "host=127.0.0.1 port=1 password='Sup3r S3cret #\\' @x' user=x",
        "host=127.0.0.1 port=1 password=Sup3r#S3cret@x user=x",
        // Strings libpq cannot parse: its error quotes the token it stopped at, here the password.
        "postgresql://pushizo:Sup3r%2#S3cret@127.0.0.1:1/db",
        "postgresql://pushizo:Sup3r#S3cret@[::1/db",
        "host=127.0.0.1 port=1 password='Sup3rS3cret",
        "host=127.0.0.1 port=1 password=Sup3r S3cret",
    ])
    func connectionFailureRedactsPassword(connectionString: String) async throws {
        let error = try await onThread { () -> PostgresError? in
            do {
                _ = try PostgresConnection(connectionString: connectionString)
                return nil
            } catch let error as PostgresError {
                return error
            }
        }
        let failure = try #require(error)
        #expect(failure.code == .connectionFailed || failure.code == .invalidConnectionString)
        #expect(failure.isConnectionProblem)
        #expect(!failure.message.isEmpty)
        for secret in ["Sup3rS3cret", "Sup3r", "S3cret"] {
            #expect(!failure.message.contains(secret), "\(failure.message)")
            #expect(!failure.description.contains(secret))
            #expect(!"\(failure)".contains(secret))
        }
    }

    /// The secrets are libpq's own parse of the string (`PQconninfoParse`), decoded, plus their spelling.
    @Test(arguments: [
        ("postgresql://u:p%40ss@h/db", ["p%40ss", "p@ss"]),
        ("postgres://u:pw@h/db?password=other&connect_timeout=1", ["pw", "other"]),
        ("postgresql://u:se#cret@h/db", ["se#cret"]),
        ("postgresql://u:se%23cret@h/db", ["se%23cret", "se#cret"]),
        ("postgresql://u:a%20b%27c%22d%40e@h/db", ["a%20b%27c%22d%40e", "a b'c\"d@e"]),
        ("postgresql://u@h/db?pass%77ord=q%23z&sslpassword=k3y", ["q%23z", "q#z", "k3y"]),
        ("host=h password = 'it\\'s # @ x' user=u", ["it's # @ x", "it\\'s # @ x"]),
        ("host=h password=se#cret@x user=u", ["se#cret@x"]),
        ("host=h password='with space' sslpassword=\"q\" user=u", ["with space", "\"q\""]),
    ])
    func redactionUsesLibpqsParse(_ string: String, _ secrets: [String]) {
        let found = Set(PostgresRedaction.secrets(in: string))
        #expect(found == Set(secrets), "\(string) -> \(found)")
        let redacted = PostgresRedaction.redact("echo: \(secrets.joined(separator: " | "))", connectionString: string)
        for secret in secrets { #expect(!redacted.contains(secret), "\(redacted)") }
    }

    /// No secret in a plain database name. A string libpq refuses keeps libpq's message, with only the password
    /// masked: where the string breaks libpq's grammar inside a password, the rest of that password is masked too.
    @Test(arguments: [
        ("postgresql://u:se%2#cret@h/db", #"invalid percent-encoded token: "********""#),
        ("host=h port=1 password=Sup3r S3cret", #"missing "=" after "********" in connection info string"#),
        ("host=h port 1 password=x", #"missing "=" after "port" in connection info string"#),
        ("host=h password=Sup3r S3cret=x", #"invalid connection option "********""#),
        ("host=h hots=x password=y", #"invalid connection option "hots""#),
        ("host=h password='Sup3r", "unterminated quoted string in connection info string"),
        ("postgresql://pushizo:Sup3r#S3cret@[::1/db",
         #"end of string reached when looking for matching "]" in IPv6 host address in URI: "postgresql://pushizo:********@[::1/db""#),
        ("postgresql://u@h/db?password=Sup3r&S3cret&host=x",
         #"missing key/value separator "=" in URI query parameter: "********""#),
        ("postgresql://u@h/db?pass%7word=x", #"invalid percent-encoded token: "pass%7word""#),
    ])
    func unparsableStringsKeepLibpqsMessage(_ string: String, _ message: String) {
        #expect(PostgresRedaction.secrets(in: "pushizo").isEmpty)
        guard case .failure(let error) = PostgresRedaction.parse(string) else {
            Issue.record("parsed: \(string)")
            return
        }
        #expect(error.message.trimmingCharacters(in: .newlines) == message)
        #expect(PostgresConnection.connectionStringProblem(string) == "invalid connection string: " + message)
    }

    /// A string that parses but holds a value libpq refuses when connecting: libpq's own message, found without
    /// contacting anything (the hosts here do not resolve); values libpq takes give no problem.
    @Test(arguments: [
        ("postgresql://u:Sup3r@db.invalid/x?sslmode=bogus", #"invalid sslmode value: "bogus""#),
        ("host=db.invalid password=Sup3r target_session_attrs=nope", #"invalid target_session_attrs value: "nope""#),
        ("host=db.invalid channel_binding=zz", #"invalid channel_binding value: "zz""#),
        ("host=db.invalid gssencmode=always", #"invalid gssencmode value: "always""#),
        ("host=a,b port=1,2,3", "could not match 3 port numbers to 2 hosts"),
        ("host=a hostaddr=127.0.0.1 port=Sup3r password=Sup3r", #"invalid integer value "********" for connection option "port""#),
        // Checked by libpq only in a blocking connect, which the worker never makes: without this check a connect
        // would have no time limit.
        ("host=db.invalid connect_timeout=abc", #"invalid integer value "abc" for connection option "connect_timeout""#),
        ("postgresql://db.invalid/x?connect_timeout=10s", #"invalid integer value "10s" for connection option "connect_timeout""#),
    ])
    func refusedOptionValuesKeepLibpqsMessage(_ string: String, _ message: String) {
        #expect(PostgresConnection.connectionStringProblem(string) == "invalid connection option: " + message)
    }

    @Test(arguments: [
        "postgresql://u:p@db.invalid/x?sslmode=require&target_session_attrs=any",
        "host=a,b,c port=5432 sslmode=prefer channel_binding=prefer",
        "host=db.invalid hostaddr=127.0.0.1 port=1",
        "host=db.invalid connect_timeout= 10 ",
        "pushizo",
    ])
    func acceptedOptionValuesGiveNoProblem(_ string: String) {
        #expect(PostgresConnection.connectionStringProblem(string) == nil)
    }

    /// Only the password is masked in libpq's messages: a password that is also a word of the message (a role
    /// named like it) masks that word, nothing else; a URI password with an unencoded `/` or `@`, which libpq
    /// cuts into a host or port, is masked in its pieces.
    @Test func onlyThePasswordIsMasked() {
        let text = #"connection to server failed: FATAL:  28P01: password authentication failed for user "pushizo""#
        #expect(PostgresRedaction.redact(text, connectionString: "host=h user=pushizo password=se#cret") == text)
        #expect(PostgresRedaction.redact(text, connectionString: "postgresql://pushizo:s3cret@h/db?sslpassword=k3y") == text)
        let port = #"invalid integer value "pa55" for connection option "port""#
        #expect(PostgresRedaction.redact(port, connectionString: "postgresql://u:pa55/w0rd@h/db")
            == #"invalid integer value "********" for connection option "port""#)
        let host = #"could not translate host name "w0rd@h" to address"#
        #expect(PostgresRedaction.redact(host, connectionString: "postgresql://u:pa55@w0rd@h/db")
            == #"could not translate host name "********@h" to address"#)
    }

    /// `serverAddress` is libpq's PQhost/PQport of the host that answered: with two hosts of which the first
    /// refuses, the second.
    @Test func serverAddressNamesTheHostThatAnswered() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let single = try PostgresConnection(connectionString: url)
                let server = try #require(single.serverAddress)
                single.close()
                #expect(single.serverAddress == nil)
                // Later keywords win: the same server, after a loopback port nothing listens on.
                let both = try PostgresConnection(
                    connectionString: url + " host=127.0.0.1,\(server.host) port=1,\(server.port)")
                defer { both.close() }
                #expect(both.serverAddress == server)
            }
        }
    }

    @Test func transactionCommitsAndRollsBack() async throws {
        struct Boom: Error {}
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let c = try PostgresConnection(connectionString: url)
                try c.execute("CREATE TABLE t (id int PRIMARY KEY)")
                let value = try c.transaction { tx in
                    _ = try tx.query("INSERT INTO t VALUES ($1)", [1])
                    return 42
                }
                #expect(value == 42)
                #expect(throws: Boom.self) {
                    try c.transaction { tx in
                        _ = try tx.query("INSERT INTO t VALUES ($1)", [2])
                        throw Boom()
                    }
                }
                #expect(!c.isInTransaction)
                // A statement error inside, swallowed by the body, still ends in a rollback that is reported.
                let swallowed = try #require(throws: PostgresError.self) {
                    try c.transaction { tx in
                        _ = try tx.query("INSERT INTO t VALUES ($1)", [3])
                        _ = try? tx.query("INSERT INTO t VALUES ($1)", [1])
                    }
                }
                #expect(swallowed.sqlState == "25P02")
                var ids = try c.query("SELECT id FROM t ORDER BY id").map { try $0.decode(Int.self, "id") }
                #expect(ids == [1])
                // Nested: the inner failure rolls back to its savepoint only.
                try c.transaction { outer in
                    _ = try outer.query("INSERT INTO t VALUES ($1)", [10])
                    #expect(throws: PostgresError.self) {
                        try outer.transaction { inner in
                            _ = try inner.query("INSERT INTO t VALUES ($1)", [11])
                            _ = try inner.query("INSERT INTO t VALUES ($1)", [1])
                        }
                    }
                    try outer.transaction { inner in _ = try inner.query("INSERT INTO t VALUES ($1)", [12]) }
                }
                ids = try c.query("SELECT id FROM t ORDER BY id").map { try $0.decode(Int.self, "id") }
                #expect(ids == [1, 10, 12])
            }
        }
    }

    /// `SET LOCAL` settings last for the transaction they came with (and, from a savepoint, until the enclosing
    /// transaction ends); a refused name or value throws and leaves no transaction open.
    @Test func transactionLocalSettings() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url)
            defer { c.close() }
            func planCacheMode() throws -> String {
                try c.query("SELECT current_setting('plan_cache_mode') AS v")[0].decode(String.self, "v")
            }
            let before = try planCacheMode()
            #expect(before == "auto")
            let inside = try c.transaction(localSettings: ["plan_cache_mode": "force_generic_plan", "application_name": "it's local"]) {
                _ = $0
                return (try planCacheMode(), try c.query("SELECT current_setting('application_name') AS v")[0].decode(String.self, "v"))
            }
            #expect(inside.0 == "force_generic_plan")
            #expect(inside.1 == "it's local")
            #expect(try planCacheMode() == before)
            try c.transaction { outer throws in
                try outer.transaction(localSettings: ["plan_cache_mode": "force_custom_plan"]) { _ throws in
                    #expect(try planCacheMode() == "force_custom_plan")
                }
                #expect(try planCacheMode() == "force_custom_plan")
            }
            #expect(try planCacheMode() == before)
            let badValue = try #require(throws: PostgresError.self) {
                try c.transaction(localSettings: ["plan_cache_mode": "sometimes"]) { _ in Issue.record("body ran") }
            }
            #expect(badValue.sqlState == "22023")
            #expect(!c.isInTransaction)
            #expect(throws: PostgresError.self) {
                try c.transaction(localSettings: ["plan_cache_mode; DROP TABLE x": "auto"]) { _ in Issue.record("body ran") }
            }
            for name in ["a..b", ".a", "a.", "1a", "A", "a.b.c", "a b", ""] {
                #expect(throws: PostgresError.self, "\(name)") {
                    try c.transaction(localSettings: [name: "1"]) { _ in Issue.record("body ran") }
                }
            }
            #expect(PostgresConnection.isParameterName("auto_explain.log_min_duration"))
            #expect(PostgresConnection.isParameterName("work_mem2"))
            try c.transaction { outer throws in
                #expect(throws: PostgresError.self) {
                    try outer.transaction(localSettings: ["no_such_parameter": "1"]) { _ in Issue.record("body ran") }
                }
                #expect(throws: PostgresError.self) {
                    try outer.transaction(localSettings: ["plan_cache_mode": "sometimes"]) { _ in Issue.record("body ran") }
                }
                // The savepoint was rolled back: the outer transaction goes on.
                #expect(try outer.query("SELECT 1 AS one")[0].decode(Int.self, "one") == 1)
            }
            #expect(!c.isInTransaction)
        }
    }

    @Test func listenAndWaitForNotifications() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let listener = try PostgresConnection(connectionString: url)
            let sender = try PostgresConnection(connectionString: url)
            let channel = "Mixed \"Case\" \(UUID().uuidString)"
            try listener.listen(channel)
            #expect(try listener.waitForNotifications(timeout: .milliseconds(50)).isEmpty)
            _ = try sender.query("SELECT pg_notify($1, $2)", [channel, "héllo"])
            _ = try sender.query("SELECT pg_notify($1, $2)", [channel, ""])
            var received: [PostgresNotification] = []
            for _ in 0..<100 where received.count < 2 {
                received += try listener.waitForNotifications(timeout: .milliseconds(200))
            }
            #expect(received == [
                PostgresNotification(channel: channel, payload: "héllo", processID: sender.processID),
                PostgresNotification(channel: channel, payload: "", processID: sender.processID),
            ])
            // A terminated session shows up as connectionLost from the wait.
            let admin = try PostgresConnection(connectionString: url)
            _ = try admin.query("SELECT pg_terminate_backend($1, 10000)", [listener.processID])
            let lost = try #require(throws: PostgresError.self) {
                for _ in 0..<100 { _ = try listener.waitForNotifications(timeout: .milliseconds(200)) }
            }
            #expect(lost.isConnectionProblem)
            #expect(listener.isConnectionBad)
        }
    }

    @Test func closedConnectionThrows() async throws {
        let url = try TestDatabase.baseConnectionString()
        try await onThread {
            let c = try PostgresConnection(connectionString: url, applicationName: "pushizo-test-close")
            c.close()
            c.close()
            #expect(c.isConnectionBad)
            let error = try #require(throws: PostgresError.self) { try c.query("SELECT 1") }
            #expect(error.code == .connectionLost)
        }
    }
}
