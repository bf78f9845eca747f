import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Testing

/// Attack finding 3: a PING flood whose PONGs the attacker never reads grew the victim's memory
/// without bound (100 MB of PINGs, +1 GB). Now the victim stops reading from such a peer.
@Suite("Control-frame floods", .serialized)
struct ControlFloodTests {
    let harness = LoopbackHarness(group: MultiThreadedEventLoopGroup.singleton)

    @Test func aPeerThatDoesNotReadItsPongsIsNoLongerRead() async throws {
        // A long dead-peer deadline, so the victim keeps the held connection for the whole test.
        let victim = try EngineProbe(
            name: "victim", preference: .none, keepalive: KeepalivePolicy(interval: .seconds(30), deadPeerDeadline: .seconds(120)))
        let attacker = try WirePeerID(identifier: .random(), displayName: "flooder")
        let data = try await victim.engine.connectionData(forPeer: attacker.identifier).get()
        let log = EventLog()
        let configuration = ConnectionConfiguration(
            role: .dialer, localPeer: attacker, encryptionPreference: .none, tls: try TLSContext(identity: nil),
            purpose: .connectionData, token: data.token)
        let channel = try await harness.dial(port: Int(data.endpoints[0].port), configuration: configuration, log: log)
        #expect(try await log.wait { $0.established?.isEncrypted == false })

        // From here the attacker writes raw plaintext PINGs and never reads.
        try await channel.setOption(.autoRead, value: false).get()
        // Small buffers on the attacker's own socket, so what it manages to push measures the victim.
        try await channel.setOption(.socketOption(.so_rcvbuf), value: 32 * 1024).get()
        try await channel.setOption(.socketOption(.so_sndbuf), value: 32 * 1024).get()
        try await channel.pipeline.removeHandler(name: "events").get()
        try await channel.pipeline.removeHandler(name: "connection").get()
        try await channel.pipeline.addHandler(DiscardingHandler()).get()
        var burst = ByteBuffer()
        for index in 0..<3_000 { try Frame.ping(UInt64(index)).encode(into: &burst) }

        let limit = 64 * 1_048_576
        var pushed = 0
        var stalledSince: ContinuousClock.Instant?
        let deadline = ContinuousClock.now + .seconds(60)
        while pushed < limit && ContinuousClock.now < deadline {
            if channel.isWritable {
                stalledSince = nil
                channel.writeAndFlush(burst, promise: nil)
                pushed += burst.readableBytes
                await Task.yield()
            } else {
                let since = stalledSince ?? .now
                stalledSince = since
                // The victim stopped reading: the attacker's sends stay stuck.
                if ContinuousClock.now - since > .seconds(2) { break }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        // The victim's socket buffers hold a few MiB; without the limit all 64 MiB went through.
        // (A peer held this way that never reads again is dropped at the dead-peer deadline.)
        #expect(pushed < 16 * 1_048_576, "the attacker pushed \(pushed) bytes of PING")
        #expect(victim.engine.connectedPeers.map(\.identifier) == [attacker.identifier])

        // Once the attacker reads its answers, the victim reads again.
        try await channel.setOption(.autoRead, value: true).get()
        channel.read()
        #expect(try await eventually(seconds: 20) { channel.isWritable })
        try await channel.close()
        await victim.shutdown()
    }
}
