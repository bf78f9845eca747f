import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Attack finding 4: connected members introducing made-up peers. Before the fix one member
/// introduced 20 fake members and the session connected all of them (21 peers), and 2,000
/// introductions made it dial 12,000 addresses the attacker chose.
@Suite("Mesh introductions from hostile members", .serialized)
struct IntroductionFloodTests {
    let harness = LoopbackHarness(group: MultiThreadedEventLoopGroup.singleton)

    /// Listeners that accept anyone and answer as the fake peer they were introduced as.
    func fakePeers(_ count: Int, firstByte: UInt8) async throws -> [(WirePeerID, any Channel)] {
        var fakes: [(WirePeerID, any Channel)] = []
        for index in 0..<count {
            // Small identifiers, so the victim (larger) is the side that dials.
            let peer = try WirePeerID(identifier: Bytes16(high: UInt64(firstByte) << 48 | UInt64(index), low: 1), displayName: "fake\(index)")
            let configuration = ConnectionConfiguration(
                role: .listener, localPeer: peer, encryptionPreference: .required, tls: try TLSContext(identity: nil))
            fakes.append((peer, try await harness.listen(configuration: configuration, log: EventLog())))
        }
        return fakes
    }

    func introductions(of fakes: [(WirePeerID, any Channel)]) throws -> [Frame] {
        try stride(from: 0, to: fakes.count, by: WireLimits.maxMeshIntroductionEntries).map { start in
            let entries = try fakes[start..<min(start + WireLimits.maxMeshIntroductionEntries, fakes.count)].map { peer, listener in
                MeshIntroduction.Entry(
                    peerID: peer, endpoint: try WireEndpoint(address: .ipv4(0x7F00_0001), port: UInt16(listener.localAddress!.port!)))
            }
            return .meshIntroduction(try MeshIntroduction(entries: entries))
        }
    }

    @Test func hostileIntroductionsNeitherBreakTheMemberLimitNorDriveUnboundedDials() async throws {
        var victim = try EngineProbe(name: "victim")
        while victim.peer.identifier.high >> 56 < 0x10 { victim = try EngineProbe(name: "victim") }
        let first = try await RawMember.join(victim, name: "mallory")
        let second = try await RawMember.join(victim, name: "trudy")
        #expect(try await eventually { victim.engine.connectedPeers.count == 2 })

        let fakesOfFirst = try await fakePeers(20, firstByte: 1)
        let fakesOfSecond = try await fakePeers(20, firstByte: 2)
        let framesOfFirst = try introductions(of: fakesOfFirst)
        let framesOfSecond = try introductions(of: fakesOfSecond)
        for _ in 0..<50 {
            for frame in framesOfFirst { first.channel.write(frame, promise: nil) }
            for frame in framesOfSecond { second.channel.write(frame, promise: nil) }
        }
        // A message after the flood: once it arrives, every introduction before it was handled.
        first.channel.write(Frame.message(ByteBuffer(string: "done"), isEnd: true), promise: nil)
        second.channel.write(Frame.message(ByteBuffer(string: "done"), isEnd: true), promise: nil)
        first.channel.flush()
        second.channel.flush()
        let mallory = first.peer.identifier
        let trudy = second.peer.identifier
        #expect(try await eventually { victim.messageCount(from: mallory) == 1 && victim.messageCount(from: trudy) == 1 })

        let fakeIDs = Set((fakesOfFirst + fakesOfSecond).map(\.0.identifier))
        let dialed = victim.reportedPeers().intersection(fakeIDs)
        // Each introducer's quota is 6, and the session holds 8 members (itself and 7 others).
        #expect(dialed.count == WireLimits.maxSessionMembers - 1 - 2)
        #expect(try await eventually { victim.connectedCount(among: fakeIDs) == dialed.count })
        #expect(victim.engine.connectedPeers.count <= WireLimits.maxSessionMembers - 1)
        #expect(victim.maximumConnectedAtOnce() <= WireLimits.maxSessionMembers - 1)

        await victim.shutdown()
        for (_, listener) in fakesOfFirst + fakesOfSecond { try? await listener.close() }
    }
}

extension EngineProbe {
    func messageCount(from peer: Bytes16) -> Int { allMessages().filter { $0.0 == peer }.count }

    func connectedCount(among peers: Set<Bytes16>) -> Int {
        engine.connectedPeers.filter { peers.contains($0.identifier) }.count
    }
}
