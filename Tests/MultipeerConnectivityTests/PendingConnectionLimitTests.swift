import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Testing

/// Attack findings 6 and 7: at the common limit of 1,024 open files, idle and trickling
/// connections locked a real peer out and the network thread spun on the failing accept; each
/// half-finished handshake held about 70 KB with no cap. The victim runs in a child process with
/// that limit; the attackers run here.
@Suite("Pending connections under a 1,024 open-file limit", .serialized)
struct PendingConnectionLimitTests {
    @Test func aRealPeerGetsInPastIdleTricklingAndHalfFinishedConnections() async throws {
        let (me, child, port) = try Self.victimAtAFileLimit()
        defer { child.stop() }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var preamble = ByteBuffer()
        try Preamble(encryptionPreference: .required, hasIdentity: false).encode(into: &preamble)
        let attack = Attack(port: port, group: group, preamble: preamble, clientHello: try Self.partialClientHello())
        // 1,000 idle, 1,000 trickling and 200 half-finished. They do not come back once shed: an
        // attacker that reconnects as fast as it is shed keeps any accept queue full, and the
        // kernel then drops a real peer's SYN (a 1 s retransmission) whatever the server does.
        for index in 0..<2_200 { attack.open(kind: index < 1_000 ? .idle : index < 2_000 ? .trickling : .halfFinished) }
        // Every attacker has had its first connect answered: the victim is under the full load.
        #expect(try await eventually(seconds: 30) { attack.attempts >= 2_200 }, "only \(attack.attempts) connects answered")

        let started = ContinuousClock.now
        try me.connect(to: child.peer, nearbyConnectionData: child.data)
        #expect(try await eventually(seconds: 2) { me.connectedPeers == [child.peer] })
        #expect(ContinuousClock.now - started < .seconds(2))

        attack.stop()
        await me.disconnectAndWait()
        try await group.shutdownGracefully()
    }

    /// Issue 28, hole 4: the same attackers, but each reconnects as soon as it is closed, so shedding
    /// never thins them out. A real peer must still get in within a second, and the victim must not
    /// spin accepting and closing: its busiest thread stays under half a core while under attack.
    @Test(.disabled("open (issue 28): on a debug build the real peer now gets in in 4 runs of 4 (one at 1.03 s), but the victim's busiest thread uses 0.70-0.77 of a core"))
    func aRealPeerGetsInPastAttackersThatReconnectAsTheyAreShed() async throws {
        let (me, child, port) = try Self.victimAtAFileLimit()
        defer { child.stop() }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let attack = Attack(port: port, group: group, preamble: ByteBuffer(), clientHello: ByteBuffer(), reopens: true)
        for index in 0..<2_000 { attack.open(kind: index < 1_000 ? .idle : .trickling) }
        #expect(try await eventually(seconds: 30) { attack.attempts >= 2_000 }, "only \(attack.attempts) connects answered")
        // Long enough for a victim that spins to show it; attackers keep reconnecting throughout.
        let before = try ThreadTimes(pid: child.process.processIdentifier)
        try await Task.sleep(for: .seconds(3))
        let busiest = try ThreadTimes(pid: child.process.processIdentifier).busiestShare(since: before)
        let reconnects = attack.attempts

        let started = ContinuousClock.now
        try me.connect(to: child.peer, nearbyConnectionData: child.data)
        #expect(try await eventually(seconds: 5) { me.connectedPeers == [child.peer] })
        let took = ContinuousClock.now - started
        #expect(took < .seconds(1), "took \(took) with \(attack.attempts - reconnects) reconnects meanwhile")
        #expect(attack.attempts > 2_000, "the attackers never had to reconnect")
        #expect(busiest < 0.5, "the victim's busiest thread used \(busiest) of a core")

        attack.stop()
        await me.disconnectAndWait()
        try await group.shutdownGracefully()
    }

    /// A real session here, and the victim: a peer in a child process at a 1,024 open-file limit.
    static func victimAtAFileLimit() throws -> (MCSession, ChildPeer, port: Int) {
        var files = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        files.rlim_cur = max(files.rlim_cur, min(files.rlim_max, 16_384))
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        try #require(files.rlim_cur >= 4_096, "this test needs 4,096 open files for its attackers")
        let me = MCSession(peer: MCPeerID(displayName: "real"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let child = try ChildPeer("peer", for: me.myPeerID, "1024")
        let port = Int(try ConnectionData.decode(ByteBuffer(bytes: child.data)).endpoints[0].port)
        return (me, child, port)
    }

    /// The first half of a real ClientHello, after which the attacker stalls.
    static func partialClientHello() throws -> ByteBuffer {
        let client = try TLSEngine(context: TLSContext(identity: nil), role: .client)
        _ = try client.advanceHandshake()
        let hello = try #require(client.takeOutbound())
        return hello.getSlice(at: hello.readerIndex, length: hello.readableBytes / 2)!
    }
}

/// Attackers that connect until the victim answers, then idle, trickle or stall mid-handshake.
final class Attack: @unchecked Sendable {
    // @unchecked: the counters are behind the lock; the rest is immutable.
    enum Kind { case idle, trickling, halfFinished }
    let port: Int
    let group: any EventLoopGroup
    let preamble: ByteBuffer
    let clientHello: ByteBuffer
    private let lock = NSLock()
    private var open = 0
    private var answered = 0
    private var stopped = false
    private var channels: [ObjectIdentifier: any Channel] = [:]

    /// Whether a connection the victim closes is opened again at once.
    let reopens: Bool

    init(port: Int, group: any EventLoopGroup, preamble: ByteBuffer, clientHello: ByteBuffer, reopens: Bool = false) {
        self.reopens = reopens
        self.port = port
        self.group = group
        self.preamble = preamble
        self.clientHello = clientHello
    }

    var connections: Int { lock.withLock { open } }
    /// Connects that succeeded or failed so far, reconnects included.
    var attempts: Int { lock.withLock { answered } }

    func open(kind: Kind) {
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

    func stop() {
        let all = lock.withLock {
            stopped = true
            return Array(channels.values)
        }
        for channel in all { channel.close(promise: nil) }
    }
}

/// CPU time of each thread of a process, from /proc, to tell a spinning thread from an idle one.
struct ThreadTimes {
    let taken: ContinuousClock.Instant
    let ticks: [Int: Int]

    init(pid: Int32) throws {
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
    func busiestShare(since earlier: ThreadTimes) -> Double {
        let seconds = Double((taken - earlier.taken).components.seconds) + Double((taken - earlier.taken).components.attoseconds) / 1e18
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let busiest = ticks.map { tid, total in total - (earlier.ticks[tid] ?? 0) }.max() ?? 0
        return Double(busiest) / ticksPerSecond / seconds
    }
}
