import Foundation

/// Runs the real `pushizo-worker` with `arguments` and only `environment` (plus a `PATH`), to its end; returns its
/// exit status, stdout and stderr.
func runExecutable(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: GracefulShutdownTests.executable)
    process.arguments = arguments
    process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { given, _ in given }
    let output = Pipe()
    let errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    try process.run()
    async let out = onThread { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    async let err = onThread { String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    let (stdout, stderr) = try await (out, err)
    try await onThread { process.waitUntilExit() }
    return (process.terminationStatus, stdout, stderr)
}
