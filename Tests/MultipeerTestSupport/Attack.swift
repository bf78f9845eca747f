import Foundation
import NIOCore
import NIOPosix

/// Attackers that connect until the victim answers, then idle, trickle or stall mid-handshake.
public final class Attack: @unchecked Sendable {
    // @unchecked: the counters are behind the lock; the rest is immutable.
    public enum Kind: Sendable { case idle, trickling, halfFinished }
    public let port: Int
    public let group: any EventLoopGroup
    public let preamble: ByteBuffer
    public let clientHello: ByteBuffer
    private let lock = NSLock()
    private var open = 0
    private var answered = 0
    private var stopped = false
    private var channels: [ObjectIdentifier: any Channel] = [:]

    /// Whether a connection the victim closes is opened again at once.
    public let reopens: Bool

    public init(port: Int, group: any EventLoopGroup, preamble: ByteBuffer, clientHello: ByteBuffer, reopens: Bool = false) {
        self.reopens = reopens
        self.port = port
        self.group = group
        self.preamble = preamble
        self.clientHello = clientHello
    }

    public var connections: Int { lock.withLock { open } }
    /// Connects that succeeded or failed so far, reconnects included.
    public var attempts: Int { lock.withLock { answered } }

    public func open(kind: Kind) {
        guard !lock.withLock({ stopped }) else { return }
        ClientBootstrap(group: group).connect(host: "127.0.0.1", port: port).whenComplete { result in
            self.lock.withLock { self.answered += 1 }
            guard case .success(let channel) = result else {
                // Refused while the victim is saturated: try again shortly.
                self.group.next().scheduleTask(in: .milliseconds(50)) { self.open(kind: kind) }
                return
            }
            self.lock.withLock {
                self.open += 1
                self.channels[ObjectIdentifier(channel)] = channel
            }
            switch kind {
            case .idle: break
            case .trickling:
                channel.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(200), delay: .milliseconds(200)) { task in
                    guard channel.isActive else { return task.cancel() }
                    channel.writeAndFlush(ByteBuffer(bytes: [0x4D]), promise: nil)
                }
            case .halfFinished:
                channel.write(self.preamble, promise: nil)
                channel.writeAndFlush(self.clientHello, promise: nil)
            }
            channel.closeFuture.whenComplete { _ in
                self.lock.withLock {
                    self.open -= 1
                    self.channels[ObjectIdentifier(channel)] = nil
                }
                if self.reopens { self.open(kind: kind) }
            }
        }
    }

    public func stop() {
        let all = lock.withLock {
            stopped = true
            return Array(channels.values)
        }
        for channel in all { channel.close(promise: nil) }
    }
}

/// CPU time of each thread of a process, from /proc, to tell a spinning thread from an idle one.
public struct ThreadTimes {
    public let taken: ContinuousClock.Instant
    public let ticks: [Int: Int]

    public init(pid: Int32) throws {
        taken = .now
        var ticks: [Int: Int] = [:]
        for task in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
            guard let tid = Int(task), let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // Fields after the command name: state is field 3, utime 14 and stime 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { continue }
            ticks[tid] = user + system
        }
        self.ticks = ticks
    }

    /// The largest share of one core any thread used between `earlier` and now.
    public func busiestShare(since earlier: ThreadTimes) -> Double {
        let seconds = Double((taken - earlier.taken).components.seconds) + Double((taken - earlier.taken).components.attoseconds) / 1e18
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let busiest = ticks.map { tid, total in total - (earlier.ticks[tid] ?? 0) }.max() ?? 0
        return Double(busiest) / ticksPerSecond / seconds
    }
}
