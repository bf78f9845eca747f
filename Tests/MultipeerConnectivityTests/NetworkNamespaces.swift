import Foundation
import Synchronization
import MultipeerTestSupport

/// Network namespaces a test creates and deletes, joined by veth pairs to a bridge in a hub
/// namespace, with multicast routed onto each one's link: mDNS traffic that never reaches the
/// machine's real interfaces. Needs root and iproute2.
final class NetworkNamespaces: @unchecked Sendable {
    let names: [String]
    /// The namespace that joins the others (a bridge, or a relay a test puts there).
    let hub: String
    private let tag: Int
    private let ipv4: Bool
    private let ipv6: Bool

    /// The IPv4 address of namespace `index`'s interface `mp<link>`.
    func address(of index: Int, link: Int = 0) -> String { "169.254.\(tag + link).\(index + 1)" }

    /// The IPv6 link-local address of namespace `index`'s interface `mp<link>`, as RFC 5952 writes it.
    func ipv6Address(of index: Int, link: Int = 0) -> String { "fe80::\(link + 1):\(String(index + 1, radix: 16))" }

    static var available: Bool {
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
    }

    /// `count` namespaces; each has interface `mp0` with address 169.254.<tag>.<n>/24 (`ipv4`) and
    /// fe80::1:<n>/64 (`ipv6`), and no other address: no automatic link-local, no duplicate
    /// address detection, so each address is usable at once.
    init(count: Int, ipv4: Bool = true, ipv6: Bool = false) throws {
        tag = Int(getpid() % 200) + 20
        self.ipv4 = ipv4
        self.ipv6 = ipv6
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
                try addLink(to: index, number: 0)
            }
        } catch {
            remove()
            throw error
        }
    }

    /// Adds a bridge to the hub, a link apart from `br0` for `addLink`.
    func addBridge(_ bridge: String) throws {
        try Self.ip("netns", "exec", hub, "ip", "link", "add", bridge, "type", "bridge")
        try Self.ip("netns", "exec", hub, "ip", "link", "set", bridge, "up")
    }

    /// Adds interface `mp<number>` to namespace `index`, a veth pair to one of the hub's bridges,
    /// with the families and addresses of `mp0`.
    func addLink(to index: Int, number: Int, bridge: String = "br0") throws {
        let name = names[index]
        let (inside, outside) = ("mp\(number)", "h\(index)l\(number)")
        try Self.ip("netns", "exec", hub, "ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", name)
        try Self.ip("netns", "exec", hub, "ip", "link", "set", outside, "master", bridge, "up")
        try Self.ip("netns", "exec", name, "ip", "link", "set", inside, "addrgenmode", "none")
        if ipv4 { try Self.ip("netns", "exec", name, "ip", "addr", "add", "\(address(of: index, link: number))/24", "dev", inside) }
        if ipv6 { try Self.ip("netns", "exec", name, "ip", "addr", "add", "\(ipv6Address(of: index, link: number))/64", "dev", inside, "nodad") }
        try Self.ip("netns", "exec", name, "ip", "link", "set", inside, "up", "multicast", "on")
        if ipv4 && number == 0 { try Self.ip("netns", "exec", name, "ip", "route", "add", "224.0.0.0/4", "dev", inside) }
    }

    /// Deletes interface `mp<number>` of namespace `index` (and its veth peer with it).
    func removeLink(from index: Int, number: Int) throws {
        try Self.ip("netns", "exec", names[index], "ip", "link", "del", "mp\(number)")
    }

    func remove() {
        for name in names + [hub] { _ = try? Self.ip("netns", "del", name) }
    }

    deinit { remove() }

    @discardableResult
    static func ip(_ arguments: String...) throws -> String { try ip(arguments) }

    @discardableResult
    static func ip(_ arguments: [String]) throws -> String {
        let result = try BuiltProducts.runBlocking(URL(fileURLWithPath: "/usr/sbin/ip"), arguments, seconds: 20)
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

    /// Runs `program` (multipeer-demo by default) inside `namespace`. With `hiding`, the program
    /// runs in a mount namespace of its own where that file reads as empty (/dev/null bound over
    /// it), as if the package that holds it were broken or absent; the machine's file is untouched.
    /// With `standardErrorToo`, standard error joins the lines read; with `keepingStandardError`,
    /// it is kept apart (`standardErrorTail`), for a failing test to show the program's log.
    init(
        in namespace: String, program: String? = nil, _ arguments: [String], environment: [String: String] = [:], hiding: String? = nil,
        standardErrorToo: Bool = false, keepingStandardError: Bool = false
    ) throws {
        let command = ["/usr/sbin/ip", "netns", "exec", namespace, try program ?? BuiltProducts.executable("multipeer-demo").path] + arguments
        if let hiding {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
            process.arguments = ["--mount", "--propagation", "private", "sh", "-c", "mount --bind /dev/null \"$0\" && exec \"$@\"", hiding] + command
        } else {
            process.executableURL = URL(fileURLWithPath: command[0])
            process.arguments = Array(command.dropFirst())
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = output
        if standardErrorToo { process.standardError = output }
        let errors = Pipe()
        if keepingStandardError && !standardErrorToo { process.standardError = errors }
        process.standardInput = input
        try process.run()
        startReading()
        if keepingStandardError && !standardErrorToo { keep(errors) }
    }

    private final class KeptText: Sendable { let text = Mutex("") }
    private let standardErrorText = KeptText()

    /// The last `limit` characters the program wrote to standard error (kept only if asked).
    func standardErrorTail(_ limit: Int = 6_000) -> String { String(standardErrorText.text.withLock { $0 }.suffix(limit)) }

    private func keep(_ errors: Pipe) {
        let handle = errors.fileHandleForReading
        let kept = standardErrorText
        Thread.detachNewThread {
            while case let data = handle.availableData, !data.isEmpty {
                kept.text.withLock { kept in
                    kept += String(decoding: data, as: UTF8.self)
                    // Bounded: the tail is what a failure needs.
                    if kept.utf8.count > 200_000 { kept = String(kept.suffix(100_000)) }
                }
            }
        }
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
        // `ip netns exec` (and `unshare` and `sh` before it) replaced itself with the demo, so this is the demo's own PID.
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
