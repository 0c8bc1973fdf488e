// pushizo-worker: the Pushizo delivery worker. `pushizo-worker help` lists the verbs.
import BuildInfo
import Foundation
import Worker

// `--env-file PATH` (every command, before any other thread starts): its variables join the process environment.
let arguments: [String]
let environment: [String: String]
do {
    let (remaining, paths) = try EnvironmentFileOption.extract(Array(CommandLine.arguments.dropFirst()))
    arguments = remaining
    environment = try EnvironmentFileOption.apply(paths, to: ProcessInfo.processInfo.environment)
} catch {
    FileHandle.standardError.write(Data("pushizo-worker: \(error)\n".utf8))
    // `--env-file` without a path is a wrong command line (2); a file that cannot be read, a setting (EX_CONFIG).
    exit(error is EnvironmentFileOption.MissingPath ? 2 : 78)
}
guard let verb = arguments.first else {
    FileHandle.standardError.write(Data("\(Help.text)\n".utf8))
    exit(2)
}
let rest = Array(arguments.dropFirst())
// Before any other thread starts: no signal a daemon may be sent (SIGHUP from a reload or a log rotator,
// SIGUSR1, ...) takes its default action and ends it, and every thread inherits the mask (SignalHandling).
if verb == "run" || verb == "emulator" { SignalHandling.prepare() }
// Before any other thread allocates (see MallocArenas).
if verb == "run" { MallocArenas.limitUnlessConfigured(environment: environment) }

do {
    switch verb {
    case "run":
        try await RunCommand.main(environment: environment, arguments: rest)
    case "migrate":
        try MigrateCommand.main(environment: environment, arguments: rest)
    case "distribute":
        try DistributeCommand.main(environment: environment, arguments: rest)
    case "emulator":
        try await EmulatorCommand.main(environment: environment, arguments: rest)
    case "emulator-subscription":
        try EmulatorSubscriptionCommand.main(arguments: rest)
    case "preview":
        do {
            try PreviewCommand.main(environment: environment, arguments: rest)
        } catch let error as PreviewError {
            FileHandle.standardError.write(Data("pushizo-worker preview: \(error)\n".utf8))
            exit(2)
        }
    case "maintain":
        try MaintainCommand.main(environment: environment, arguments: rest)
    case "status":
        try StatusCommand.main(environment: environment, arguments: rest)
    case "pause", "resume", "cancel", "retry":
        try OperatorCommand.main(verb: verb, environment: environment, arguments: rest)
    case "check":
        try await CheckCommand.main(environment: environment, arguments: rest)
    case "help", "--help", "-h":
        print(Help.text)
    case "version", "--version":
        print(BuildInfo.versionLine)
    default:
        FileHandle.standardError.write(Data("pushizo-worker: unknown command \"\(verb)\"\n\n\(Help.text)\n".utf8))
        exit(2)
    }
} catch let error as UsageError {
    // Exit statuses: docs/operations.md, "Exit statuses".
    FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker \(verb): ") + "\n").utf8))
    exit(2)
} catch let error as ConfigurationError {
    FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker: ") + "\n").utf8))
    exit(78)  // EX_CONFIG (sysexits.h): systemd's RestartPreventExitStatus keeps a bad config from looping
} catch {
    FileHandle.standardError.write(Data((TerminalError.text(error, prefix: "pushizo-worker \(verb): ") + "\n").utf8))
    exit(1)
}
