import Foundation
import Testing

/// The shipped example alert rules (config/prometheus/) are valid for Prometheus and fire as documented.
@Suite("Example Prometheus alert rules")
struct AlertRulesTests {
    static var directory: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("config/prometheus").path
    }

    /// promtool, or `nil` (with a line saying the test is skipped) when the `prometheus` package is missing.
    static func promtool(for test: String) -> String? {
        if let promtool = findExecutable("promtool") { return promtool }
        print("SKIPPED \(test): promtool is not installed (apt-get install prometheus)")
        return nil
    }

    @Test func promtoolAcceptsTheRules() async throws {
        guard let promtool = Self.promtool(for: "promtool check rules") else { return }
        let (status, output) = try await runTool(promtool, ["check", "rules", "\(Self.directory)/pushizo-worker.rules.yml"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("SUCCESS"), "\(output)")
    }

    /// promtool's rule unit tests: each alert fires on the series that should fire it and not on healthy ones.
    @Test func theAlertsFireOnTheirConditionsOnly() async throws {
        guard let promtool = Self.promtool(for: "promtool test rules") else { return }
        let (status, output) = try await runTool(promtool, ["test", "rules", "\(Self.directory)/pushizo-worker.rules.test.yml"])
        #expect(status == 0, "\(output)")
    }
}
