import Foundation
import Glibc
import MultipeerCrypto
import MultipeerTestSupport
import Synchronization
import Testing

/// One `interop-peer` child: commands in, lines out. Every wait has a deadline; `kill()` ends it
/// with SIGKILL (a child inherits the test thread's blocked signals, SIGTERM among them).
/// @unchecked: the Process and Pipes are set up in init and then only used through thread-safe calls.
final class HarnessPeer: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private let process = Process()
    /// Our end of the child's standard input: a socket, so that a write to a child that died
    /// fails with EPIPE (MSG_NOSIGNAL) instead of raising SIGPIPE in the test process.
    private let input: Int32
    private let output = Pipe()
    private let lines = LineQueue()
    private let exited = Exit()
    /// The hex peer ID from the READY line.
    private(set) var peer = ""

    /// With `namespace`, the harness runs inside that network namespace.
    init(_ arguments: [String], namespace: String? = nil) throws {
        if let namespace {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
            process.arguments = ["netns", "exec", namespace, try BuiltProducts.executable("interop-peer").path] + arguments
        } else {
            process.executableURL = try BuiltProducts.executable("interop-peer")
            process.arguments = arguments
        }
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw Failure(description: "socketpair: errno \(errno)")
        }
        input = ends[0]
        let childInput = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
        process.standardInput = childInput
        process.standardOutput = output
        process.terminationHandler = { [exited] process in exited.record(process.terminationStatus) }
        do {
            try process.run()
        } catch {
            close(input)
            throw error
        }
        try? childInput.close()  // the child has its copy
        // A thread of its own reads: a blocking read must not hold a task's thread.
        let (reader, lines) = (output.fileHandleForReading, lines)
        Thread.detachNewThread {
            var buffered = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                buffered += chunk
                while let newline = buffered.firstIndex(of: 0x0A) {
                    lines.push(String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self))
                    buffered = Data(buffered[(newline + 1)...])
                }
            }
            lines.end()
        }
    }

    /// Waits for READY (the first line) and keeps the peer ID.
    func ready() async throws {
        let fields = try await expect("READY ")
        guard fields.count == 2 else { throw Failure(description: "bad READY line: \(fields)") }
        peer = fields[1]
    }

    /// Both start, `b` makes connection data for `a`, `a` connects, and both report `state` for
    /// the other as the first state after connecting.
    static func connect(_ a: HarnessPeer, _ b: HarnessPeer, expecting state: String) async throws {
        try await a.ready()
        try await b.ready()
        try b.send("MAKE-DATA \(a.peer)")
        let data = try await b.expect("DATA \(a.peer)")
        try a.send("CONNECT \(b.peer) \(data[2])")
        #expect(try await a.settledState(of: b.peer) == state)
        #expect(try await b.settledState(of: a.peer) == state)
        // Checked last: the states may come out before the answer.
        #expect(try await a.line("OK CONNECT") == ["OK", "CONNECT"])
    }

    /// The first state of `peer` other than connecting.
    func settledState(of peer: String) async throws -> String {
        while true {
            let fields = try await expect("STATE \(peer) ", seconds: 30)
            if fields.count == 3 && fields[2] != "connecting" { return fields[2] }
        }
    }

    deinit { close(input) }

    func send(_ command: String) throws {
        let bytes = Array((command + "\n").utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(input, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw Failure(description: "writing \"\(command)\" to the harness: errno \(errno)") }
            sent += count
        }
    }

    /// The end of input, as a tester closing its pipe.
    func closeInput() throws { shutdown(input, Int32(SHUT_WR)) }

    /// The fields of the next line that starts with `prefix`; the lines before it are passed over
    /// (they stay in the transcript). Throws if the output ends or the deadline passes first.
    @discardableResult
    func expect(_ prefix: String, seconds: Double = 20) async throws -> [String] {
        let lines = lines
        do {
            return try await withDeadline(seconds: seconds) {
                while let line = await lines.next() {
                    if line.hasPrefix(prefix) { return line.split(separator: " ").map(String.init) }
                }
                throw Failure(description: "the output ended")
            }
        } catch {
            throw Failure(description: "waiting for \"\(prefix)\": \(error); printed so far:\n\(lines.transcript.joined(separator: "\n"))")
        }
    }

    /// The fields of a line printed so far that starts with `prefix`, if any; never waits.
    func printed(_ prefix: String) -> [String]? {
        lines.transcript.first { $0.hasPrefix(prefix) }.map { $0.split(separator: " ").map(String.init) }
    }

    /// Every line printed so far that starts with `prefix`, as fields; never waits.
    func allPrinted(_ prefix: String) -> [[String]] {
        lines.transcript.filter { $0.hasPrefix(prefix) }.map { $0.split(separator: " ").map(String.init) }
    }

    /// The fields of the first line that starts with `prefix`, printed already (passed over or
    /// taken) or still to come. No race: a line not yet in the transcript is not yet taken either.
    func line(_ prefix: String) async throws -> [String] {
        if let line = lines.transcript.first(where: { $0.hasPrefix(prefix) }) { return line.split(separator: " ").map(String.init) }
        return try await expect(prefix)
    }

    /// QUIT: BYE is the last line, and the process exits 0.
    func quit() async throws {
        try send("QUIT")
        try await expect("BYE")
        let status = try await exitStatus()
        #expect(status == 0)
        #expect(lines.transcript.last == "BYE")
    }

    func exitStatus(seconds: Double = 20) async throws -> Int32 {
        let exited = exited
        return try await withDeadline(seconds: seconds) { await exited.status() }
    }

    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }
}

/// Lines as the reader thread pushes them, taken in order by one waiting task at a time.
private final class LineQueue: Sendable {
    private struct State {
        var pending: [String] = []
        var all: [String] = []
        var ended = false
        var waiter: CheckedContinuation<String?, Never>?
    }

    private let state = Mutex(State())

    func push(_ line: String) {
        let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
            state.all.append(line)
            guard let waiter = state.waiter else {
                state.pending.append(line)
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: line)
    }

    func end() {
        let waiter = state.withLock { state in
            defer { state.waiter = nil }
            state.ended = true
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    func next() async -> String? {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> String?? in
                if !state.pending.isEmpty { return .some(state.pending.removeFirst()) }
                if state.ended { return .some(nil) }
                // A waiter left behind by a deadline that passed is dropped for the new one.
                state.waiter?.resume(returning: nil)
                state.waiter = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Every line printed so far, for assertions on lines passed over and for failure messages.
    var transcript: [String] { state.withLock { $0.all } }
}

/// The child's exit status, once it has one.
private final class Exit: Sendable {
    private let state = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))

    func record(_ status: Int32) {
        let waiters = state.withLock { state in
            state.status = status
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: status) }
    }

    func status() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = state.withLock { state -> Int32? in
                if let status = state.status { return status }
                state.waiters.append(continuation)
                return nil
            }
            if let status { continuation.resume(returning: status) }
        }
    }
}
