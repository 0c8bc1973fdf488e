import Foundation

/// Figures about this process from Linux's `/proc/self/status` (proc(5)).
public enum ProcessStatistics {
    /// Peak resident set size (`VmHWM`) in bytes, or `nil` where `/proc` is unavailable.
    public static func peakResidentBytes() -> Int? {
        field("VmHWM")
    }

    /// Current resident set size (`VmRSS`) in bytes, or `nil` where `/proc` is unavailable.
    public static func residentBytes() -> Int? {
        field("VmRSS")
    }

    private static func field(_ name: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            // "VmHWM:     12345 kB"
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count >= 2, let kilobytes = Int(parts[1]) else { return nil }
            return kilobytes * 1024
        }
        return nil
    }
}
