import Glibc

/// Whether stderr is connected to systemd's journal, as systemd.exec(5) ("Environment variables in spawned
/// processes", `$JOURNAL_STREAM`) says to tell: the variable holds `<device>:<inode>` (decimal) of the stream
/// systemd connected, and it is inherited by every child, whatever its stderr later became; only a process whose
/// stderr has that very device and inode writes to the journal.
public enum JournalStream {
    /// Read once, at the first log line.
    public static let stderrIsJournal = matches(
        getenv("JOURNAL_STREAM").map { String(cString: $0) }, descriptor: STDERR_FILENO)

    /// Whether `value` (`JOURNAL_STREAM`'s text) names the file open at `descriptor`.
    public static func matches(_ value: String?, descriptor: Int32) -> Bool {
        guard let value else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }
}
