import Foundation
import Synchronization
internal import Glibc
internal import CPushizoGlibcShims

/// An object with a file descriptor registered in an event loop; called on the loop thread only.
protocol LoopHandler: AnyObject {
    /// `events` is the epoll mask (`EPOLLIN`, `EPOLLOUT`, `EPOLLERR`, `EPOLLHUP`).
    func handleEvents(_ events: UInt32)
    /// The loop is stopping: close the descriptor and fail whatever waits on it.
    func loopStopping()
}

/// Identifies a timer scheduled with `HTTP2EventLoop.schedule(after:_:)`.
typealias LoopTimerID = UInt64

/// One I/O thread running `epoll` over non-blocking sockets (the reactor that drives every HTTP/2 connection of
/// the clients and servers created on it). Other threads hand work to it through a queue and wake it with an
/// `eventfd`. Every nghttp2 session and OpenSSL `SSL` object lives on this thread only, so they need no locks.
///
/// Create one or a few per process; `shutdown()` stops the thread (connections are closed, waiting requests fail
/// with `.shutdown`).
public final class HTTP2EventLoop: Sendable {
    /// Thread name, shown by debuggers and `top -H`.
    public let name: String
    let core: LoopCore

    /// Starts the I/O thread.
    /// - Throws: `HTTP2Error(.setupFailed)` when `epoll_create1` or `eventfd` fail (descriptor limit reached).
    public init(name: String = "pushizo-io") throws {
        // A write to a socket the peer closed raises SIGPIPE, which kills the process; OpenSSL writes through
        // write(2), so MSG_NOSIGNAL alone is not enough.
        signal(SIGPIPE, SIG_IGN)
        self.name = name
        self.core = try LoopCore()
        let core = self.core
        let thread = Thread {
            // Linux limits thread names to 15 bytes; shown by top -H, perf and debuggers.
            Thread.current.name = String(name.utf8.prefix(15)) ?? "pushizo-io"
            core.run()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Stops the I/O thread after the work already handed to it: every connection closes and every request still
    /// waiting fails with `.shutdown`. Does not wait for the thread to finish. Calling it twice is harmless.
    public func shutdown() {
        core.stop()
    }

    /// A liveness probe: runs `probe` (which must be quick and must not block) on the I/O thread once the work
    /// queued before it has run, so a thread stuck in one callback never runs it. Returns false (and drops
    /// `probe`) when the loop is shut down.
    public func probe(_ probe: @escaping @Sendable () -> Void) -> Bool {
        execute(probe)
    }

    /// Runs `work` on the loop thread soon. Returns false (and drops `work`) when the loop is shut down.
    @discardableResult
    func execute(_ work: @escaping @Sendable () -> Void) -> Bool {
        core.execute(work)
    }

    var inLoop: Bool { core.inLoop }
}

/// The loop's state. `@unchecked Sendable`: the queue and flags are behind a `Mutex`; everything in `local` is
/// read and written on the loop thread only (asserted by `inLoop` in debug builds).
final class LoopCore: @unchecked Sendable {
    private struct Shared {
        var tasks: [@Sendable () -> Void] = []
        var stopped = false
        /// True while the loop thread is (about to be) blocked in epoll_wait with a non-zero timeout: only then
        /// does `execute` need to write the eventfd. A busy loop picks new tasks up at the end of its iteration.
        var sleeping = false
    }

    private let shared = Mutex(Shared())
    private let threadID = Atomic<UInt>(0)
    private let epollFD: Int32
    private let wakeFD: Int32

    // Loop-thread-only state.
    private var handlers: [Int32: LoopHandler] = [:]
    private var timerHeap: [(deadline: ContinuousClock.Instant, id: LoopTimerID)] = []
    private var timerCallbacks: [LoopTimerID: () -> Void] = [:]
    private var nextTimerID: LoopTimerID = 1
    private var soon: [() -> Void] = []
    private var stopHooks: [() -> Void] = []

    init() throws {
        epollFD = pz_epoll_create()
        guard epollFD >= 0 else { throw HTTP2Error(.setupFailed, "epoll_create1 failed: \(errnoText())") }
        wakeFD = pz_eventfd()
        guard wakeFD >= 0 else {
            close(epollFD)
            throw HTTP2Error(.setupFailed, "eventfd failed: \(errnoText())")
        }
        _ = pz_epoll_add(epollFD, wakeFD, PZ_EPOLLIN)
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    var inLoop: Bool { threadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    func execute(_ work: @escaping @Sendable () -> Void) -> Bool {
        let needWake: Bool? = shared.withLock { s in
            if s.stopped { return nil }
            s.tasks.append(work)
            if !s.sleeping { return false }
            s.sleeping = false
            return true
        }
        guard let needWake else { return false }
        if needWake { wake() }
        return true
    }

    func stop() {
        let wasStopped = shared.withLock { s in
            defer { s.stopped = true }
            return s.stopped
        }
        if !wasStopped { wake() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: Loop-thread API

    /// Registers `fd` for `events` (EPOLLIN/EPOLLOUT); the loop keeps `handler` alive until `unregister`.
    func register(_ fd: Int32, _ handler: LoopHandler, events: UInt32) -> Bool {
        assert(inLoop)
        guard pz_epoll_add(epollFD, fd, events) == 0 else { return false }
        handlers[fd] = handler
        return true
    }

    func modify(_ fd: Int32, events: UInt32) {
        assert(inLoop)
        _ = pz_epoll_mod(epollFD, fd, events)
    }

    /// Removes `fd` from epoll (call before closing it).
    func unregister(_ fd: Int32) {
        assert(inLoop)
        _ = pz_epoll_del(epollFD, fd)
        handlers[fd] = nil
    }

    /// Calls `callback` on the loop thread once `delay` has passed (unless cancelled).
    func schedule(after delay: Duration, _ callback: @escaping () -> Void) -> LoopTimerID {
        assert(inLoop)
        let id = nextTimerID
        nextTimerID += 1
        timerCallbacks[id] = callback
        // Cancelled timers stay in the heap until due; rebuild when they dominate (30 s request deadlines at
        // thousands of requests per second would otherwise pile up).
        if timerHeap.count > 4096 && timerHeap.count > 4 * timerCallbacks.count {
            let live = timerHeap.filter { timerCallbacks[$0.id] != nil }
            timerHeap = []
            timerHeap.reserveCapacity(live.count * 2)
            for item in live { heapPush(item) }
        }
        heapPush((ContinuousClock.now.advanced(by: delay), id))
        return id
    }

    func cancelTimer(_ id: LoopTimerID?) {
        if let id { timerCallbacks[id] = nil }
    }

    /// Runs `work` after the current event has been handled (used to leave nghttp2 callbacks before acting).
    func runSoon(_ work: @escaping () -> Void) {
        assert(inLoop)
        soon.append(work)
    }

    /// Called once when the loop stops, before the handlers are told.
    func addStopHook(_ hook: @escaping () -> Void) {
        assert(inLoop)
        stopHooks.append(hook)
    }

    // MARK: The loop

    func run() {
        threadID.store(UInt(pthread_self()), ordering: .releasing)
        var fds = [Int32](repeating: 0, count: 256)
        var events = [UInt32](repeating: 0, count: 256)
        while true {
            var timeout = nextTimeoutMilliseconds()
            if timeout != 0 {
                timeout = shared.withLock { s in
                    if !s.tasks.isEmpty || s.stopped { return 0 }
                    s.sleeping = true
                    return timeout
                }
            }
            let count = pz_epoll_wait(epollFD, &fds, &events, 256, timeout)
            if count > 0 {
                for i in 0..<Int(count) {
                    let fd = fds[i]
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
                        continue
                    }
                    // A handler may have been removed by an earlier event in this batch.
                    handlers[fd]?.handleEvents(events[i])
                }
            }
            runExpiredTimers()
            let (tasks, stopped) = shared.withLock { s in
                defer { s.tasks.removeAll(keepingCapacity: true); s.sleeping = false }
                return (s.tasks, s.stopped)
            }
            for task in tasks { task() }
            // Deferred work (dispatching, flushing) runs once per iteration, so every stream submitted by the
            // events and tasks above leaves in as few writes as possible.
            runSoonQueue()
            if stopped { break }
        }
        // Stopping: tell the owners, then the descriptors.
        for hook in stopHooks { hook() }
        stopHooks.removeAll()
        runSoonQueue()
        for handler in Array(handlers.values) { handler.loopStopping() }
        handlers.removeAll()
        runSoonQueue()
        timerCallbacks.removeAll()
        timerHeap.removeAll()
        // Drain work that raced with stop(); it sees the closed state.
        let late = shared.withLock { s in
            defer { s.tasks.removeAll() }
            return s.tasks
        }
        for task in late { task() }
        runSoonQueue()
    }

    private func runSoonQueue() {
        while !soon.isEmpty {
            let work = soon
            soon.removeAll(keepingCapacity: true)
            for w in work { w() }
        }
    }

    private func nextTimeoutMilliseconds() -> Int32 {
        if !soon.isEmpty { return 0 }
        while let top = timerHeap.first, timerCallbacks[top.id] == nil { _ = heapPop() }
        guard let top = timerHeap.first else { return -1 }
        let remaining = top.deadline - ContinuousClock.now
        if remaining <= .zero { return 0 }
        let (seconds, attoseconds) = remaining.components
        let ms = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: ms)
    }

    private func runExpiredTimers() {
        let now = ContinuousClock.now
        while let top = timerHeap.first, top.deadline <= now {
            _ = heapPop()
            if let callback = timerCallbacks.removeValue(forKey: top.id) { callback() }
        }
    }

    // Binary min-heap on deadline; cancelled timers are skipped lazily.
    private func heapPush(_ item: (deadline: ContinuousClock.Instant, id: LoopTimerID)) {
        timerHeap.append(item)
        var i = timerHeap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if timerHeap[parent].deadline <= timerHeap[i].deadline { break }
            timerHeap.swapAt(parent, i)
            i = parent
        }
    }

    private func heapPop() -> (deadline: ContinuousClock.Instant, id: LoopTimerID)? {
        guard !timerHeap.isEmpty else { return nil }
        timerHeap.swapAt(0, timerHeap.count - 1)
        let item = timerHeap.removeLast()
        var i = 0
        let n = timerHeap.count
        while true {
            let l = 2 * i + 1, r = l + 1
            var smallest = i
            if l < n, timerHeap[l].deadline < timerHeap[smallest].deadline { smallest = l }
            if r < n, timerHeap[r].deadline < timerHeap[smallest].deadline { smallest = r }
            if smallest == i { break }
            timerHeap.swapAt(i, smallest)
            i = smallest
        }
        return item
    }
}

func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}
