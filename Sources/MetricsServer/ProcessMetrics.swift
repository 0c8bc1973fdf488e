import Foundation
import Metrics
internal import Glibc

/// The standard `process_*` metrics of Prometheus's client libraries ("Writing client libraries", process
/// metrics), read from Linux's `/proc/self` (proc(5)) each time the registry is rendered, on the
/// listener's thread. Where `/proc` is unavailable the samples are left out.
public enum ProcessMetrics {
    /// Adds `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
    /// `process_open_fds`, `process_max_fds` and `process_start_time_seconds` to `registry`.
    public static func register(in registry: MetricsRegistry) {
        registry.callback(
            "process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.", type: .counter
        ) { ProcessStat.read()?.cpuSeconds }
        registry.callback(
            "process_resident_memory_bytes", help: "Resident memory size in bytes.", type: .gauge
        ) { ProcessStat.read()?.residentBytes }
        registry.callback(
            "process_virtual_memory_bytes", help: "Virtual memory size in bytes.", type: .gauge
        ) { ProcessStat.read()?.virtualBytes }
        registry.callback("process_open_fds", help: "Number of open file descriptors.", type: .gauge) {
            openDescriptors().map(Double.init)
        }
        registry.callback("process_max_fds", help: "Maximum number of open file descriptors.", type: .gauge) {
            var limit = rlimit()
            guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
            return Double(limit.rlim_cur)
        }
        let start = ProcessStat.startTime()
        registry.callback(
            "process_start_time_seconds", help: "Start time of the process since unix epoch in seconds.", type: .gauge
        ) { start }
    }

    /// `RLIMIT_NOFILE` as the type getrlimit takes on glibc.
    private static var RLIMIT_NOFILE_VALUE: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_NOFILE.rawValue) }

    /// Entries of `/proc/self/fd` (the directory's own descriptor, open while counting, is not counted).
    static func openDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { count += 1 }
        }
        return max(0, count - 1)
    }
}

/// The fields of `/proc/self/stat` the process metrics use.
struct ProcessStat {
    var cpuSeconds: Double
    var virtualBytes: Double
    var residentBytes: Double
    /// Clock ticks after boot at which the process started.
    var startTicks: Double

    static func read() -> ProcessStat? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8) else { return nil }
        return parse(text, ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))), pageSize: Double(sysconf(Int32(_SC_PAGESIZE))))
    }

    /// Parses a `/proc/[pid]/stat` line. The command name (field 2) is in parentheses and may hold spaces,
    /// so fields are counted after its last `)`: field 3 (state) is index 0 there.
    static func parse(_ text: String, ticksPerSecond: Double, pageSize: Double) -> ProcessStat? {
        guard let close = text.lastIndex(of: ")"), ticksPerSecond > 0 else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        // utime (14), stime (15), starttime (22), vsize (23), rss (24).
        guard fields.count > 21, let user = Double(fields[11]), let system = Double(fields[12]),
            let start = Double(fields[19]), let virtual = Double(fields[20]), let resident = Double(fields[21])
        else { return nil }
        return ProcessStat(
            cpuSeconds: (user + system) / ticksPerSecond, virtualBytes: virtual, residentBytes: resident * pageSize,
            startTicks: start)
    }

    /// The process's start in seconds since the epoch: boot time (`btime` of `/proc/stat`) plus its start
    /// in ticks after boot.
    static func startTime() -> Double? {
        guard let stat = read(), let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            guard let boot = Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) else { return nil }
            return boot + stat.startTicks / ticks
        }
        return nil
    }
}
