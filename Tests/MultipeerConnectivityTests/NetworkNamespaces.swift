import Foundation
import MultipeerTestSupport

/// Network namespaces a test creates and deletes, joined by veth pairs to a bridge in a hub
/// namespace, with multicast routed onto each one's link: mDNS traffic that never reaches the
/// machine's real interfaces. Needs root and iproute2.
final class NetworkNamespaces: @unchecked Sendable {
    let names: [String]
    private let hub: String
    private let tag: Int

    /// The address of namespace `index`'s interface `mp0`.
    func address(of index: Int) -> String { "169.254.\(tag).\(index + 1)" }

    static var available: Bool {
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
    }

    /// `count` namespaces; each has interface `mp0` with address 169.254.<tag>.<n>/24.
    init(count: Int) throws {
        tag = Int(getpid() % 200) + 20
        let prefix = "mpd\(getpid())x\(UInt16.random(in: 0 ... .max))"
        hub = "\(prefix)h"
        names = (1...count).map { "\(prefix)n\($0)" }
        do {
            try Self.ip("netns", "add", hub)
            try Self.ip("netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge")
            try Self.ip("netns", "exec", hub, "ip", "link", "set", "br0", "up")
            for (index, name) in names.enumerated() {
                try Self.ip("netns", "add", name)
                try Self.ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
                try Self.ip("netns", "exec", hub, "ip", "link", "add", "h\(index)", "type", "veth", "peer", "name", "mp0", "netns", name)
                try Self.ip("netns", "exec", hub, "ip", "link", "set", "h\(index)", "master", "br0", "up")
                try Self.ip("netns", "exec", name, "ip", "addr", "add", "\(address(of: index))/24", "dev", "mp0")
                try Self.ip("netns", "exec", name, "ip", "link", "set", "mp0", "up", "multicast", "on")
                try Self.ip("netns", "exec", name, "ip", "route", "add", "224.0.0.0/4", "dev", "mp0")
            }
        } catch {
            remove()
            throw error
        }
    }

    func remove() {
        for name in names + [hub] { _ = try? Self.ip("netns", "del", name) }
    }

    deinit { remove() }

    @discardableResult
    static func ip(_ arguments: String...) throws -> String {
        let result = try BuiltProducts.run(URL(fileURLWithPath: "/usr/sbin/ip"), arguments, seconds: 20)
        guard result.status == 0 else {
            throw CommandFailed(description: "ip \(arguments.joined(separator: " ")) failed: \(result.output)")
        }
        return result.output
    }
}

/// A `multipeer-demo` discovery mode running inside a namespace; its output read line by line.
final class NamespacedDemo: @unchecked Sendable {
    let process = Process()
    let input = Pipe()
    let output = Pipe()

    /// Runs `program` (multipeer-demo by default) inside `namespace`.
    init(in namespace: String, program: String? = nil, _ arguments: [String], environment: [String: String] = [:]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = ["netns", "exec", namespace, try program ?? BuiltProducts.executable("multipeer-demo").path] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        startReading()
    }

    /// The next line, or nil at the end of output or when `seconds` pass first. One reader
    /// thread feeds a queue, so a wait that times out never loses a later line.
    func nextLine(within seconds: Double) async -> String? {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: self.lines.take(within: seconds)) }
        }
    }

    private let lines = LineQueue()

    private func startReading() {
        let handle = output.fileHandleForReading
        let lines = lines
        Thread.detachNewThread {
            var line = Data()
            while true {
                let byte = handle.readData(ofLength: 1)
                guard let first = byte.first else {
                    if !line.isEmpty { lines.put(String(decoding: line, as: UTF8.self)) }
                    lines.finish()
                    return
                }
                if first == 0x0A {
                    lines.put(String(decoding: line, as: UTF8.self))
                    line.removeAll()
                } else {
                    line.append(first)
                }
            }
        }
    }

    func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

    /// SIGKILL: no goodbye can go out. (A child of the test process ignores SIGTERM.)
    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        // `ip netns exec` replaced itself with the demo, so this is the demo's own PID.
    }

    /// Ends the program the polite way (end of its input, so it can say goodbye and clean up
    /// what it started), and kills it if it has not exited within `seconds`.
    func finish(within seconds: Double = 5) {
        try? input.fileHandleForWriting.close()
        let exited = DispatchSemaphore(value: 0)
        let process = process
        Thread.detachNewThread {
            process.waitUntilExit()
            exited.signal()
        }
        if exited.wait(timeout: .now() + seconds) == .timedOut { kill() }
    }

    deinit { finish() }
}

struct CommandFailed: Error, CustomStringConvertible {
    let description: String
}

/// Lines from a child, waited for with a deadline.
private final class LineQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var lines: [String] = []
    private var finished = false

    func put(_ line: String) {
        condition.withLock {
            lines.append(line)
            condition.broadcast()
        }
    }

    func finish() {
        condition.withLock {
            finished = true
            condition.broadcast()
        }
    }

    func take(within seconds: Double) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        return condition.withLock {
            while lines.isEmpty && !finished {
                if !condition.wait(until: deadline) { break }
            }
            return lines.isEmpty ? nil : lines.removeFirst()
        }
    }
}
