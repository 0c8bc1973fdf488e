import Foundation
import Testing
import Worker

@Suite("Configuration from environment and flags")
struct ConfigurationTests {
    let base = ["PUSHIZO_DATABASE_URL": "postgresql://u:hunter2@db/pushizo"]

    func configuration(_ environment: [String: String], _ arguments: [String] = []) throws -> WorkerConfiguration {
        try WorkerConfiguration(
            ConfigurationReader(
                environment: environment, arguments: arguments, keys: WorkerConfiguration.keys,
                booleanKeys: [ConfigurationKey.exitWhenDrained.name]))
    }

    @Test func defaults() throws {
        let configuration = try configuration(base)
        #expect(configuration.concurrency == 2048)
        #expect(configuration.claimBatch == 200)
        #expect(configuration.lease == .seconds(120))
        #expect(configuration.exitWhenDrained == false)
        #expect(configuration.caFile == nil)
        #expect(configuration.expansionTasks == 2)
    }

    /// Expansion tasks stay below the pool's connections, so claims and completions always find one.
    @Test func expansionTasksFollowTheConnections() throws {
        var environment = base
        environment["PUSHIZO_DATABASE_CONNECTIONS"] = "2"
        #expect(try configuration(environment).expansionTasks == 1)
        environment["PUSHIZO_DATABASE_CONNECTIONS"] = "8"
        environment["PUSHIZO_EXPANSION_TASKS"] = "7"
        #expect(try configuration(environment).expansionTasks == 7)
    }

    @Test func flagsOverrideEnvironment() throws {
        var environment = base
        environment["PUSHIZO_CLAIM_BATCH"] = "50"
        let configuration = try configuration(environment, ["--claim-batch", "75", "--poll-interval=0.25", "--exit-when-drained"])
        #expect(configuration.claimBatch == 75)
        #expect(configuration.pollInterval == .milliseconds(250))
        #expect(configuration.exitWhenDrained)
    }

    @Test func unknownEnvironmentKeyNamesTheKey() {
        var environment = base
        environment["PUSHIZO_CONCURENCY"] = "5"
        #expect {
            try configuration(environment)
        } throws: { error in
            (error as? ConfigurationError)?.key == "PUSHIZO_CONCURENCY"
        }
    }

    /// `PUSHIZO_BENCH_DELIVERIES=200000 make bench` starts the worker with the bench's knobs still set, and a
    /// shell that exported the demo's port for `make demo` runs the worker with it.
    @Test func theTestSuitesAndTheBenchmarksKnobsAreIgnored() throws {
        var environment = base
        environment["PUSHIZO_DEMO_PG_PORT"] = "55533"
        environment["PUSHIZO_BENCH_DELIVERIES"] = "200000"
        environment["PUSHIZO_BENCH_WRAPPER"] = "perf record -g"
        environment["PUSHIZO_TEST_PG_PORT"] = "55541"
        #expect(try configuration(environment).concurrency == 2048)
        // The reserved prefix is whole: a near miss is still an unknown key.
        environment["PUSHIZO_BENCHDELIVERIES"] = "5"
        #expect {
            try configuration(environment)
        } throws: { error in
            (error as? ConfigurationError)?.key == "PUSHIZO_BENCHDELIVERIES"
        }
    }

    @Test func unknownFlagNamesTheFlag() {
        #expect {
            try configuration(base, ["--claim-bach", "5"])
        } throws: { error in
            "\(error)".contains("--claim-bach")
        }
    }

    @Test(arguments: [
        ("PUSHIZO_CONCURRENCY", "0"), ("PUSHIZO_CONCURRENCY", "many"), ("PUSHIZO_LEASE_SECONDS", "1"),
        ("PUSHIZO_POLL_INTERVAL", "-1"), ("PUSHIZO_EXIT_WHEN_DRAINED", "maybe"), ("PUSHIZO_CA_FILE", "/nonexistent.pem"),
        ("PUSHIZO_RETRY_MAX", "1.5"), ("PUSHIZO_EXPANSION_TASKS", "0"), ("PUSHIZO_EXPANSION_TASKS", "5"),
    ])
    func badValueNamesTheKey(key: String, value: String) {
        var environment = base
        environment[key] = value
        #expect {
            // As `run` and `check` read it: the values, then their mapping for the runtime (the CA file's trust roots).
            try configuration(environment).trustRoots()
        } throws: { error in
            (error as? ConfigurationError)?.key == key && "\(error)".contains(key)
        }
    }

    @Test func missingDatabaseURLIsReported() {
        #expect {
            try configuration([:])
        } throws: { error in
            (error as? ConfigurationError)?.key == "PUSHIZO_DATABASE_URL"
        }
    }

    @Test func secretValuesAreNotEchoed() {
        let reader = try? ConfigurationReader(
            environment: ["PUSHIZO_DATABASE_URL": "postgresql://u:hunter2@db/x"], arguments: [],
            keys: WorkerConfiguration.keys)
        // The secret key read as a number, as a key declared secret and numeric would be.
        let secretNumber = ConfigurationKey("PUSHIZO_DATABASE_URL", "a secret number", .wholeNumber(default: 0, in: 0...1), secret: true)
        #expect(throws: ConfigurationError.self) {
            _ = try reader?.int(secretNumber)
        }
        do {
            _ = try reader?.int(secretNumber)
        } catch {
            #expect(!"\(error)".contains("hunter2"))
        }
    }

    @Test func flagNamesDeriveFromKeys() {
        #expect(ConfigurationKey.claimBatch.flag == "--claim-batch")
        #expect(ConfigurationKey.environmentName(forFlag: "--emulator-listen") == "PUSHIZO_EMULATOR_LISTEN")
    }
}

@Suite("Worker roles")
struct WorkerRoleTests {
    func roles(_ value: String?) throws -> Set<WorkerRole> {
        var environment = ["PUSHIZO_DATABASE_URL": "host=/tmp"]
        environment["PUSHIZO_ROLES"] = value
        return try WorkerConfiguration(
            ConfigurationReader(environment: environment, arguments: [], keys: WorkerConfiguration.keys)).roles
    }

    @Test func parsesRoles() throws {
        #expect(try roles(nil) == [.expand, .send])
        #expect(try roles("expand") == [.expand])
        #expect(try roles(" send , expand ") == [.expand, .send])
        #expect {
            try roles("expand,mail")
        } throws: { error in
            (error as? ConfigurationError)?.key == "PUSHIZO_ROLES" && "\(error)".contains("mail")
        }
        #expect(throws: ConfigurationError.self) { try roles(",") }
    }
}
