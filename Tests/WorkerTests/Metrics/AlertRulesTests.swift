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

    /// The alert names of a rules file (`- alert: Name` lines).
    static func alertNames(inRules text: String) -> Set<String> {
        Set(text.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("- alert:") else { return nil }
            return trimmed.dropFirst("- alert:".count).trimmingCharacters(in: .whitespaces)
        })
    }

    /// The alerts a promtool test file expects firing at some evaluation (`exp_alerts:` with a list below) and
    /// those it expects silent (`exp_alerts: []`), each read from the `alertname:` line before.
    static func testedAlerts(in text: String) -> (firing: Set<String>, silent: Set<String>) {
        var firing = Set<String>()
        var silent = Set<String>()
        var current: String?
        for line in text.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("alertname:") {
                current = trimmed.dropFirst("alertname:".count).trimmingCharacters(in: .whitespaces)
            } else if let name = current, trimmed.hasPrefix("exp_alerts:") {
                if trimmed == "exp_alerts: []" { silent.insert(name) } else { firing.insert(name) }
                current = nil
            }
        }
        return (firing, silent)
    }

    /// Every alert of the rules file has a promtool case where it fires and one where it must stay quiet.
    @Test func everyAlertHasAFiringAndASilentCase() throws {
        let rules = try String(contentsOfFile: "\(Self.directory)/pushizo-worker.rules.yml", encoding: .utf8)
        let tests = try String(contentsOfFile: "\(Self.directory)/pushizo-worker.rules.test.yml", encoding: .utf8)
        let alerts = Self.alertNames(inRules: rules)
        #expect(alerts.count >= 12)
        let tested = Self.testedAlerts(in: tests)
        #expect(alerts.subtracting(tested.firing).isEmpty, "never expected firing: \(alerts.subtracting(tested.firing).sorted())")
        #expect(alerts.subtracting(tested.silent).isEmpty, "never expected silent: \(alerts.subtracting(tested.silent).sorted())")
        #expect(tested.firing.union(tested.silent).isSubset(of: alerts), "tests of unknown alerts")
    }

    /// promtool's rule unit tests: each alert fires on the series that should fire it and not on healthy ones.
    @Test func theAlertsFireOnTheirConditionsOnly() async throws {
        guard let promtool = Self.promtool(for: "promtool test rules") else { return }
        let (status, output) = try await runTool(promtool, ["test", "rules", "\(Self.directory)/pushizo-worker.rules.test.yml"])
        #expect(status == 0, "\(output)")
    }
}
