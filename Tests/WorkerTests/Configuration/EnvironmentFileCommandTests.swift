import Foundation
import Testing

/// `--env-file PATH` through the executable: the file's variables reach the command as the unit's
/// `EnvironmentFile=` would set them, winning over the shell's; a file that cannot be read exits 78 naming it.
@Suite("--env-file of the executable")
struct EnvironmentFileCommandTests {
    /// Runs `pushizo-worker <arguments>` with exactly `environment` (plus `PATH`); exit status, stdout, stderr.
    static func run(_ arguments: [String], environment: [String: String]) async throws -> (Int32, String, String) {
        let (status, stdout, stderr) = try await runExecutable(arguments, environment: environment)
        return (status, stdout, stderr)
    }

    /// The test database as a URL whose query holds `&`s (host, port and user as query parameters), for a file.
    static func url(from keyValue: String) -> String {
        var parts: [String: String] = [:]
        for pair in keyValue.split(separator: " ") {
            guard let equals = pair.firstIndex(of: "=") else { continue }
            parts[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        let encode = { (text: String) in text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text }
        return "postgresql:///\(parts["dbname"] ?? "pushizo")?host=\(encode(parts["host"] ?? "localhost"))"
            + "&port=\(parts["port"] ?? "5432")&user=\(parts["user"] ?? "postgres")&connect_timeout=10"
    }

    /// `check --env-file F`: the file's URL (its `&`s unquoted on one line, quoted on another) wins over a broken
    /// one in the shell; comments and an `export` line are taken as systemd takes them.
    @Test func checkReadsTheFileAsTheUnitWould() async throws {
        try await TestDatabase.withMigratedDatabase { keyValue in
            let url = Self.url(from: keyValue)
            #expect(url.contains("&"))
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-\(UUID()).env").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            try """
                # /etc/pushizo-worker/pushizo-worker.env
                ; settings of this host
                PUSHIZO_DATABASE_URL=\(url)
                  PUSHIZO_MIGRATIONS_DIR = "\(TestDatabase.migrationsDirectory.path)"
                export PUSHIZO_CLAIM_BATCH=0
                PUSHIZO_CONCURRENCY=\\
                64

                """.write(toFile: path, atomically: true, encoding: .utf8)
            let (status, stdout, stderr) = try await Self.run(
                ["check", "--env-file", path], environment: ["PUSHIZO_DATABASE_URL": "host=/nonexistent dbname=none"])
            #expect(status == 0, "stdout: \(stdout)\nstderr: \(stderr)")
            #expect(stdout.contains("database: ok"), "\(stdout)")
            #expect(stdout.contains("concurrency 64"), "\(stdout)")
            // systemd ignores `export KEY=...` (its key is not a name); so does the worker, and says so.
            #expect(stderr.contains("line 5: \"export PUSHIZO_CLAIM_BATCH\" is not a variable name"), "\(stderr)")

            // The same URL double-quoted, the flag's `=` form, before the command.
            try "PUSHIZO_DATABASE_URL=\"\(url)\"\nPUSHIZO_MIGRATIONS_DIR=\(TestDatabase.migrationsDirectory.path)\n"
                .write(toFile: path, atomically: true, encoding: .utf8)
            let (quoted, quotedOut, quotedErr) = try await Self.run(["--env-file=\(path)", "check"], environment: [:])
            #expect(quoted == 0, "stdout: \(quotedOut)\nstderr: \(quotedErr)")
        }
    }

    /// A file that does not exist, for any command: exit 78 (EX_CONFIG), naming it, before anything runs; the
    /// option without a path is a usage error (2).
    @Test(arguments: ["run", "check", "status", "migrate", "preview"])
    func aMissingFileExits78(command: String) async throws {
        let path = "/nonexistent/pushizo-\(UUID()).env"
        let (status, _, stderr) = try await Self.run([command, "--env-file", path], environment: [:])
        #expect(status == 78, "\(stderr)")
        #expect(stderr.contains(path) && stderr.contains("cannot be read"), "\(stderr)")
        let (bare, _, bareErr) = try await Self.run([command, "--env-file"], environment: [:])
        #expect(bare == 2, "\(bareErr)")
        #expect(bareErr.contains("--env-file needs a path"), "\(bareErr)")
    }
}
