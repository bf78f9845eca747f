import Foundation
import MultipeerConnectivity
import NIOCore
import NIOPosix

/// CPU time per side of a pair, read per thread from /proc/self/task/<tid>/schedstat (time on a
/// CPU in nanoseconds, user and kernel alike, unlike stat's 10 ms ticks).
///
/// Each side has a loop thread and a file-I/O thread of its own (`SideThreads`), and the
/// scenarios run the app's work for that side (sending, counting, reading a stream, waiting for
/// a resource) in tasks that prefer its session's task executor, so all of a side's work in
/// this process lands on its two threads. What is not counted on either side: threads of the
/// process that belong to neither (the cooperative pool, Dispatch), reported as "other"; and the
/// kernel's work outside the process. On loopback the receiver's TCP input runs in whichever
/// thread gets to it: the sender's `write` (softirq in its context) or, while the receiver holds
/// its socket, the receiver's `read`; so kernel time moves between the sides from run to run,
/// and their sum is the steadier figure. Softirq work deferred to ksoftirqd is in no thread of
/// this process and is reported beside the figures (machine-wide, all processes); write-back of
/// the receiver's file by the kernel's flusher threads is not measured.
enum ThreadCPU {
    /// Nanoseconds the thread `tid` of this process has run, nil if it is gone.
    static func nanoseconds(_ tid: Int32) -> UInt64? {
        schedstat("/proc/self/task/\(tid)/schedstat")
    }

    /// Minor page faults of the thread `tid` (stat's field 10), nil if it is gone.
    static func minorFaults(_ tid: Int32) -> UInt64? { statField(tid, 10) }

    /// Nanoseconds the thread `tid` has run in user mode (stat's field 14, in clock ticks of
    /// 10 ms: coarse, fine over a transfer of a second or more).
    static func userNanoseconds(_ tid: Int32) -> UInt64? { statField(tid, 14).map { $0 * 1_000_000_000 / ticksPerSecond } }

    private static let ticksPerSecond = UInt64(max(1, sysconf(Int32(_SC_CLK_TCK))))

    private static func statField(_ tid: Int32, _ field: Int) -> UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm)" the fields start at 3.
        let fields = text[text.index(after: end)...].split(separator: " ")
        return fields.count > field - 3 ? UInt64(fields[field - 3]) : nil
    }

    /// Nanoseconds the whole process has run, threads that ended included (getrusage).
    static var processNanoseconds: UInt64 {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func ns(_ time: timeval) -> UInt64 { UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_usec) * 1_000 }
        return ns(usage.ru_utime) + ns(usage.ru_stime)
    }

    /// Nanoseconds the kernel's ksoftirqd threads have run, machine-wide.
    static var softirqThreadNanoseconds: UInt64 {
        softirqThreads.compactMap { schedstat("/proc/\($0)/schedstat") }.reduce(0, +)
    }

    private static let softirqThreads: [Int] = {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int.init).filter { pid in
            (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.hasPrefix("ksoftirqd/") == true
        }
    }()

    private static func schedstat(_ path: String) -> UInt64? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        return text.split(separator: " ").first.flatMap { UInt64($0) }
    }

    /// The calling thread's id, from /proc/thread-self (a link to "<pid>/task/<tid>").
    static var currentThreadID: Int32 {
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
        return Int32(target.split(separator: "/").last ?? "") ?? 0
    }

    static func name(_ tid: Int32) -> String {
        ((try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8)) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The threads one side of a pair runs on: an event loop and a file-I/O pool of one thread each,
/// made once and kept for the process's life (a session's last work on its loop may come after
/// it is released).
final class SideThreads: Sendable {
    let name: String
    let group: MultiThreadedEventLoopGroup
    let pool: NIOThreadPool
    let threadIDs: [Int32]

    init(_ name: String) throws {
        self.name = name
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let loopThread = try group.next().submit { ThreadCPU.currentThreadID }.wait()
        let poolThread = try pool.runIfActive(eventLoop: group.next()) { ThreadCPU.currentThreadID }.wait()
        threadIDs = [loopThread, poolThread]
    }

    /// This side's session configuration: loopback, its own loop and pool.
    var configuration: MCSessionConfiguration {
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.eventLoop = group.next()
        configuration.fileIOPool = pool
        return configuration
    }

    var nanoseconds: UInt64 { threadIDs.compactMap(ThreadCPU.nanoseconds).reduce(0, +) }
    var minorFaults: UInt64 { threadIDs.compactMap(ThreadCPU.minorFaults).reduce(0, +) }
    var userNanoseconds: UInt64 { threadIDs.compactMap(ThreadCPU.userNanoseconds).reduce(0, +) }

    var description: String { "\(name): " + threadIDs.map { "\(ThreadCPU.name($0)) (\($0))" }.joined(separator: ", ") }

    /// What the per-side figures count, for the report.
    static let counted = "Each side: its loop and file-I/O thread (schedstat), its app tasks on its loop; "
        + "'other' = the rest of this process; loopback TCP input runs in either side's thread (see both sides); "
        + "ksoftirqd is machine-wide; user = user mode (10 ms ticks)."

    /// The receiving (a) and the sending (b) side of every pair that measures CPU per side.
    static let pair: (receiver: SideThreads, sender: SideThreads) = {
        do {
            return (try SideThreads("receiver"), try SideThreads("sender"))
        } catch {
            fatalError("cannot start the benchmark's threads: \(error)")
        }
    }()
}

/// CPU time of one transfer, per side, in nanoseconds.
struct SideCPU {
    let sender: UInt64
    let receiver: UInt64
    /// Threads of this process that are neither side's.
    let other: UInt64
    /// ksoftirqd, machine-wide.
    let softirq: UInt64
    /// Minor page faults on each side's threads.
    let senderFaults: UInt64
    let receiverFaults: UInt64
    /// The part of each side's time in user mode (the library and the app; the rest is the kernel).
    let senderUser: UInt64
    let receiverUser: UInt64

    /// Microseconds per MiB of `bytes` moved.
    func perMiB(_ bytes: Int) -> (sender: Double, receiver: Double, other: Double, softirq: Double) {
        let mib = Double(bytes) / Double(1 << 20)
        func per(_ ns: UInt64) -> Double { Double(ns) / 1000 / mib }
        return (per(sender), per(receiver), per(other), per(softirq))
    }

    /// Measures `body`; both sides should be idle before and after it.
    static func measure<T>(_ threads: (receiver: SideThreads, sender: SideThreads), _ body: () async throws -> T) async rethrows -> (T, SideCPU) {
        let faults = (threads.sender.minorFaults, threads.receiver.minorFaults)
        let user = (threads.sender.userNanoseconds, threads.receiver.userNanoseconds)
        let before = (threads.sender.nanoseconds, threads.receiver.nanoseconds, ThreadCPU.processNanoseconds, ThreadCPU.softirqThreadNanoseconds)
        let value = try await body()
        let after = (threads.sender.nanoseconds, threads.receiver.nanoseconds, ThreadCPU.processNanoseconds, ThreadCPU.softirqThreadNanoseconds)
        let sender = after.0 &- before.0
        let receiver = after.1 &- before.1
        let total = after.2 &- before.2
        return (value, SideCPU(sender: sender, receiver: receiver, other: total > sender + receiver ? total - sender - receiver : 0,
                               softirq: after.3 &- before.3, senderFaults: threads.sender.minorFaults &- faults.0,
                               receiverFaults: threads.receiver.minorFaults &- faults.1,
                               senderUser: threads.sender.userNanoseconds &- user.0, receiverUser: threads.receiver.userNanoseconds &- user.1))
    }
}

/// CPU per MiB on each side over the repetitions of one scenario, in microseconds.
struct SideSamples {
    var sender: [Double] = []
    var receiver: [Double] = []
    var other: [Double] = []
    var softirq: [Double] = []
    var senderFaults: [Double] = []
    var receiverFaults: [Double] = []
    var senderUser: [Double] = []
    var receiverUser: [Double] = []
    /// Both sides together: what moves between them (loopback TCP input runs in whichever
    /// side's thread happens to take it) cancels out.
    var both: [Double] { zip(sender, receiver).map { $0 + $1 } }

    mutating func append(_ cpu: SideCPU, bytes: Int) {
        let per = cpu.perMiB(bytes)
        sender.append(per.sender)
        receiver.append(per.receiver)
        other.append(per.other)
        softirq.append(per.softirq)
        let mib = Double(bytes) / Double(1 << 20)
        senderFaults.append(Double(cpu.senderFaults) / mib)
        receiverFaults.append(Double(cpu.receiverFaults) / mib)
        senderUser.append(Double(cpu.senderUser) / 1000 / mib)
        receiverUser.append(Double(cpu.receiverUser) / 1000 / mib)
    }

    var figures: PerSide {
        PerSide(sender: Stats(sender), receiver: Stats(receiver), other: Stats(other), softirq: Stats(softirq),
                senderFaults: Stats(senderFaults), receiverFaults: Stats(receiverFaults),
                senderUser: Stats(senderUser), receiverUser: Stats(receiverUser))
    }
}

/// Per-side CPU in the JSON results: microseconds of CPU time per MiB moved.
struct PerSide: Codable {
    let sender: Stats
    let receiver: Stats
    /// This process's threads that are neither side's.
    let other: Stats
    /// ksoftirqd threads, machine-wide.
    let softirq: Stats
    /// Minor page faults per MiB on each side's threads.
    let senderFaults: Stats
    let receiverFaults: Stats
    /// User-mode µs per MiB on each side (stat's ticks).
    let senderUser: Stats
    let receiverUser: Stats

    var note: String {
        String(format: "CPU µs/MiB: sender %.0f (%.0f–%.0f; user %.0f), receiver %.0f (%.0f–%.0f; user %.0f), other threads %.0f, ksoftirqd %.0f; "
               + "page faults/MiB: sender %.0f, receiver %.0f",
               sender.median, sender.min, sender.max, senderUser.median, receiver.median, receiver.min, receiver.max, receiverUser.median,
               other.median, softirq.median, senderFaults.median, receiverFaults.median)
    }
}
