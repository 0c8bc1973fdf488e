import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `poll(2)` on one socket plus an optional wake-up pipe, so a thread blocked waiting for PostgreSQL can
/// be woken from another thread (shutdown) instead of sleeping out its timeout.
enum PostgresSocketWait {
    enum Outcome { case ready, timedOut, woken }

    /// Waits until `fd` has `events` (`POLLIN` / `POLLOUT`; errors and hang-ups count as ready), the wake
    /// pipe becomes readable, or `timeout` passes. A negative `fd` waits on the wake pipe only.
    static func wait(fd: Int32, events: Int16, wakeFD: Int32?, timeout: Duration) -> Outcome {
        let deadline = ContinuousClock.now + max(timeout, .zero)
        var fds: [pollfd] = []
        if fd >= 0 { fds.append(pollfd(fd: fd, events: events, revents: 0)) }
        if let wakeFD { fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)) }
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            let (seconds, attoseconds) = remaining.components
            var milliseconds = max(0, seconds * 1000 + attoseconds / 1_000_000_000_000_000)
            if milliseconds == 0 && remaining > .zero { milliseconds = 1 }
            let count = fds.withUnsafeMutableBufferPointer { buffer in
                poll(buffer.baseAddress, nfds_t(buffer.count), Int32(clamping: milliseconds))
            }
            if count < 0 {
                if errno == EINTR { continue }
                return .ready  // Let the caller's libpq call surface the real error.
            }
            if count == 0 {
                if ContinuousClock.now < deadline { continue }
                return .timedOut
            }
            if let wakeFD, let last = fds.last, last.fd == wakeFD, last.revents != 0 { return .woken }
            return .ready
        }
    }

    /// A pipe whose read end is polled and whose write end wakes the poller. Closed on deinit.
    final class WakePipe: @unchecked Sendable {
        // @unchecked Sendable: the descriptors are immutable after init, and write(2) / poll(2) on them
        // are thread-safe; they are closed only in deinit, when no thread can use them any more.
        let readFD: Int32
        let writeFD: Int32

        init() {
            var fds: [Int32] = [-1, -1]
            if pipe(&fds) == 0 {
                _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
                _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
                _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
            }
            readFD = fds[0]
            writeFD = fds[1]
        }

        /// Makes the read end readable for good (nothing drains it: waking means "stop").
        func wake() {
            var byte: UInt8 = 1
            _ = write(writeFD, &byte, 1)
        }

        deinit {
            if readFD >= 0 { close(readFD) }
            if writeFD >= 0 { close(writeFD) }
        }
    }
}
