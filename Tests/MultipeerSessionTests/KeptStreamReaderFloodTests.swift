import MultipeerCrypto
import MultipeerProtocol
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import ProtocolTestSupport
import Testing

@testable import MultipeerSession

/// The stream readers a session keeps for a member whose link was lost (docs/PROTOCOL.md §7.10)
/// are a table the member can grow: each cut keeps every reader of the lost connection for the
/// resumed one. A hostile member opens a full set of streams, cuts its link, resumes without
/// resuming any of them and opens a full set again, over and over. The kept readers must stay
/// within one connection's channels plus the ones it carries now, and each set it abandons must
/// fail (its application reads an end) rather than wait.
@Suite("Kept stream readers under repeated cuts", .serialized)
struct KeptStreamReaderFloodTests {
    static let streamsPerConnection = 64
    static let cycles = 8

    /// How many readers the engine keeps for `peer`, bound to a link or waiting for one.
    static func keptReaders(at probe: EngineProbe, of peer: Bytes16) async throws -> Int {
        try await probe.engine.eventLoop.submit { probe.engine.state.value.memberStreams[peer]?.readers.count ?? 0 }.get()
    }

    /// Opens a full set of streams on `member`'s connection, one byte on each, none closed.
    static func openStreams(on member: RawMember) {
        for index in 0..<streamsPerConnection {
            let channel = UInt32(2 * index + 1)  // the dialer's (odd), increasing
            member.channel.write(Frame.streamOpen(channel: channel, name: "flood"), promise: nil)
            member.channel.write(Frame.streamData(channel: channel, ByteBuffer(bytes: [UInt8(index)])), promise: nil)
        }
        member.channel.flush()
    }

    /// A resumption connection of `member`'s session, dialed to the victim's listener.
    static func resume(
        _ member: RawMember, keys: ResumptionKeys, port: Int, harness: LoopbackHarness
    ) async throws -> RawMember {
        let configuration = ConnectionConfiguration(
            role: .dialer, localPeer: member.peer, encryptionPreference: .required, tls: try TLSContext(identity: nil),
            purpose: .resumption, token: try #require(Bytes16(bytes: keys.id)),
            resumption: .init(keys: keys, delivered: 0, peerCertificateFingerprint: nil))
        let log = EventLog()
        let channel = try await harness.dial(port: port, configuration: configuration, keepalive: KeepalivePolicy(), log: log)
        try #require(try await log.wait(until: { $0.established != nil }), "the resumption was not admitted")
        return RawMember(peer: member.peer, channel: channel, log: log)
    }

    @Test func readersOfStreamsNeverResumedStayBoundedAndFail() async throws {
        let harness = LoopbackHarness(group: MultiThreadedEventLoopGroup.singleton)
        let victim = try EngineProbe(name: "victim")
        defer { Task { await victim.shutdown() } }
        var member = try await RawMember.join(victim, name: "mallory", harness: harness)
        let keys = try #require(member.log.established?.resumptionKeys, "no link recovery on the member's connection")
        let port = try #require(try await LinkRecoveryTests.listeningPorts([victim]).first)
        let peer = member.peer.identifier

        for cycle in 0..<Self.cycles {
            Self.openStreams(on: member)
            let opened = Self.streamsPerConnection * (cycle + 1)
            try #require(try await eventually { victim.openedStreams.count == opened }, "cycle \(cycle): \(victim.openedStreams.count) of \(opened) opened")
            // The first new stream failed every reader the last cut kept: only this set is left.
            #expect(try await Self.keptReaders(at: victim, of: peer) == Self.streamsPerConnection, "cycle \(cycle)")
            let abandoned = victim.openedStreams.dropLast(Self.streamsPerConnection)
            #expect(abandoned.allSatisfy { $0.failure == TransferError(.connectionLost) }, "cycle \(cycle): an abandoned reader still waits")

            member.channel.triggerUserOutboundEvent(ConnectionCommand.sever, promise: nil)
            try #require(try await eventually { victim.linkEvents(ofPeer: peer).last == false }, "cycle \(cycle): the loss was not seen")
            // Kept for the resumed link, not failed: the member may resume them.
            #expect(try await Self.keptReaders(at: victim, of: peer) == Self.streamsPerConnection)
            member = try await Self.resume(member, keys: keys, port: port, harness: harness)
            try #require(try await eventually { victim.linkEvents(ofPeer: peer).last == true }, "cycle \(cycle): not resumed")
        }
        // Still a member throughout: the app never heard it left.
        #expect(victim.engine.connectedPeers.contains { $0.identifier == peer })
        Self.openStreams(on: member)
        try #require(try await eventually { victim.openedStreams.count == Self.streamsPerConnection * (Self.cycles + 1) })
        #expect(try await Self.keptReaders(at: victim, of: peer) == Self.streamsPerConnection)
        let failed = victim.openedStreams.filter { $0.failure == TransferError(.connectionLost) }.count
        #expect(failed == Self.streamsPerConnection * Self.cycles)
        member.channel.close(promise: nil)
    }
}
