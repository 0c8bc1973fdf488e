import CResolverTestSupport
import Foundation
import Glibc
import Synchronization

/// A DNS server on 127.0.0.1 (UDP, a port of its own) that reads every query and answers none, as a name server
/// that drops queries does: a `getaddrinfo` asking it waits for the whole timeout its thread was given. Until
/// ``answerEverything()``: then every query held and every later one is answered at once with REFUSED (RFC 1035
/// §4.1.1, RCODE 5), so lookups still waiting end and their threads come back.
///
/// Only threads that called ``useOnThisThread(timeoutSeconds:)`` ask it; the process's other lookups go wherever
/// resolv.conf says. Only loopback traffic.
public final class SilentNameServer: Sendable {
    /// The UDP port it listens on, on 127.0.0.1.
    public let port: Int
    private let fd: Int32
    private struct State {
        /// Queries read and not answered: their bytes and where they came from.
        var held: [(query: [UInt8], from: sockaddr_in)] = []
        var names: [String] = []
        var answering = false
        var stopped = false
    }
    private let state = Mutex(State())
    private let done = DispatchSemaphore(value: 0)

    /// Binds 127.0.0.1:0 and starts reading on a thread of its own.
    /// - Throws: `POSIXError` when the socket cannot be bound.
    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var address = RawTCP.loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            let code = errno
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in serve() }
        thread.name = "test-silent-dns"
        thread.start()
    }

    /// Makes `getaddrinfo` on the calling thread ask this server alone, waiting `timeoutSeconds` for an answer,
    /// one try (for a host name not in /etc/hosts).
    public func useOnThisThread(timeoutSeconds: Int) {
        precondition(pushizo_test_use_name_server(UInt16(port), Int32(timeoutSeconds)) == 0, "res_init failed")
    }

    /// Queries read so far (a lookup of one name sends two: A and AAAA).
    public var queryCount: Int { state.withLock { $0.names.count } }

    /// The distinct names asked for so far.
    public var askedNames: Set<String> { state.withLock { Set($0.names) } }

    /// Answers every query held, and every later one, with REFUSED.
    public func answerEverything() {
        let held = state.withLock { state in
            state.answering = true
            defer { state.held = [] }
            return state.held
        }
        for (query, from) in held { answer(query, to: from) }
    }

    /// Answers everything, then stops reading and closes the socket.
    public func stop() {
        answerEverything()
        state.withLock { $0.stopped = true }
        done.wait()
        close(fd)
    }

    private func serve() {
        var buffer = [UInt8](repeating: 0, count: 1500)
        while !state.withLock({ $0.stopped }) {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            var from = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = withUnsafeMutablePointer(to: &from) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, &buffer, buffer.count, 0, $0, &length) }
            }
            guard count >= 12, let name = Self.questionName(buffer[0..<count]) else { continue }
            let query = Array(buffer[0..<count])
            let answerNow = state.withLock { state in
                state.names.append(name)
                if !state.answering { state.held.append((query, from)) }
                return state.answering
            }
            if answerNow { answer(query, to: from) }
        }
        done.signal()
    }

    /// The query's header and question, marked as a response (QR) with RCODE 5, REFUSED, and no records.
    private func answer(_ query: [UInt8], to address: sockaddr_in) {
        guard let end = Self.questionEnd(query[...]) else { return }
        var response = Array(query[0..<end])
        response[2] |= 0x80
        response[3] = 0x80 | 5
        for index in 6..<12 { response[index] = 0 }
        var address = address
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, response, response.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    /// Where the first question (its name's labels, type and class) ends; nil for a malformed one.
    private static func questionEnd(_ message: ArraySlice<UInt8>) -> Int? {
        var index = message.startIndex + 12
        while index < message.endIndex {
            let length = Int(message[index])
            if length == 0 { return index + 5 <= message.endIndex ? index + 5 : nil }
            guard length < 64 else { return nil }
            index += 1 + length
        }
        return nil
    }

    /// The first question's name, dotted; nil for a malformed one.
    private static func questionName(_ message: ArraySlice<UInt8>) -> String? {
        guard questionEnd(message) != nil else { return nil }
        var labels: [String] = []
        var index = message.startIndex + 12
        while message[index] != 0 {
            let length = Int(message[index])
            labels.append(String(decoding: message[(index + 1)...(index + length)], as: UTF8.self))
            index += 1 + length
        }
        return labels.joined(separator: ".")
    }
}
