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
