import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// Streams and resources between connected session cores on a virtual clock (docs/PROTOCOL.md
/// §7.6, §7.8): windows, turns, refusal, cancel, resume after a cut, and floods of channels and
/// resumes. Every frame passes the connection machines' channel rules; a refusal of one of ours
/// would be recorded and fails the test. The core decides (ChannelMux, ResumeStore); the
/// endpoints are the harness's in-memory stand-ins, so hashing, files and the engine's reopening
/// of kept partials are the shell's to test over sockets (ResourceChannelTests, ResumeCostTests).
@Suite("Session cores back to back: streams and resources")
struct SessionCoreChannelTests {
    static let pki = try! TestPKI(name: "Channels")

    static func connectedPair(seed: UInt64 = 1) throws -> (VirtualNetwork, VirtualNetwork.Node, VirtualNetwork.Node) {
        let network = VirtualNetwork(seed: seed)
        let alice = try network.addNode("alice", identity: try pki.peer("alice"))
        let bob = try network.addNode("bob", identity: try pki.peer("bob"))
        try network.connect(alice, to: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }, limit: .seconds(10)))
        return (network, alice, bob)
    }

    static func noRefusals(_ nodes: VirtualNetwork.Node..., sourceLocation: SourceLocation = #_sourceLocation) {
        for node in nodes {
            #expect(node.channels.refusals.isEmpty, "\(node.peer.displayName): \(node.channels.refusals)", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: [0, 1, 65_535, 1_000_003])
    func aStreamArrivesWhole(size: Int) throws {
        let (network, alice, bob) = try Self.connectedPair()
        let content = seededContent(size, seed: UInt64(size))
        let source = try #require(network.openStream(from: alice, to: bob, content: content))
        #expect(network.run(until: { bob.channels.incoming.first?.outcome == .closed }, limit: .seconds(30)))
        #expect(bob.channels.incoming.first?.bytes == content)
        #expect(source.outcome == .closed)
        Self.noRefusals(alice, bob)
    }

    /// A reader that stops reading stops the writer at the windows; reading again lets the rest through.
    @Test func aReaderThatStopsReadingHoldsTheWriterAtTheWindow() throws {
        let (network, alice, bob) = try Self.connectedPair()
        bob.channels.reading = false
        let content = seededContent(3 << 20, seed: 7)
        let source = try #require(network.openStream(from: alice, to: bob, content: content))
        network.run(for: .seconds(5))
        let sink = try #require(bob.channels.incoming.first)
        #expect(sink.unread == Int(VirtualNetwork.channelLimits.channelReceiveWindow))
        #expect(source.sent == sink.unread && source.outcome == nil)
        bob.channels.reading = true
        sink.read()
        #expect(network.run(until: { sink.outcome == .closed }, limit: .seconds(30)))
        #expect(sink.bytes == content)
        Self.noRefusals(alice, bob)
    }

    /// Channels with data take turns one frame each (§7.6).
    @Test func busyChannelsTakeTurns() throws {
        let (network, alice, bob) = try Self.connectedPair()
        let sources = try (0..<3).map { index in
            try #require(network.openStream(
                from: alice, to: bob, name: "s\(index)", content: seededContent(200_000, seed: UInt64(index)), holdingData: true))
        }
        // Opened, and the receiver's wider windows are in: then all three have data at once.
        network.run(for: .seconds(1))
        ChannelSource.release(sources)
        #expect(network.run(until: { bob.channels.incoming.count == 3 && bob.channels.incoming.allSatisfy { $0.outcome == .closed } }, limit: .seconds(30)))
        let turns = try #require(alice.openChannelDrivers.first?.dataTurns)
        // While all three had data, no channel went twice in a row.
        let whileAllBusy = turns.prefix(3 * (200_000 / Frame.largestSentPayload))
        #expect(zip(whileAllBusy, whileAllBusy.dropFirst()).allSatisfy { $0 != $1 })
        #expect(Set(sources.map(\.channel)) == Set(turns))
        Self.noRefusals(alice, bob)
    }

    /// Refused channels' data, sent before the refusal arrived, gives the connection window
    /// back: after more refused data than the whole connection window, a stream still flows.
    @Test func channelsNobodyTakesAreRefusedAndTheirWindowComesBack() throws {
        let (network, alice, bob) = try Self.connectedPair()
        bob.channels.accepting = false
        var refusedBytes = 0
        for round in 0..<40 {
            let stream = try #require(network.openStream(from: alice, to: bob, content: seededContent(500_000, seed: UInt64(round))))
            let resource = try #require(network.sendResource(from: alice, to: bob, content: seededContent(1000, seed: 2)))
            network.run(for: .milliseconds(200))
            #expect(stream.outcome == .reset(.refused) && resource.outcome == .reset(.refused))
            refusedBytes += stream.sent
        }
        #expect(refusedBytes > Int(VirtualNetwork.channelLimits.connectionReceiveWindow) * 2)
        bob.channels.accepting = true
        let content = seededContent(2 << 20, seed: 3)
        _ = try #require(network.openStream(from: alice, to: bob, content: content))
        #expect(network.run(until: { bob.channels.incoming.last?.outcome == .closed }, limit: .seconds(30)))
        #expect(bob.channels.incoming.last?.bytes == content)
        Self.noRefusals(alice, bob)
    }

    @Test func aResourceIsStoredWithItsDigestChecked() throws {
        let (network, alice, bob) = try Self.connectedPair()
        let content = seededContent(700_001, seed: 11)
        let source = try #require(network.sendResource(from: alice, to: bob, content: content))
        #expect(network.run(until: { source.outcome != nil }, limit: .seconds(30)))
        #expect(source.outcome == .delivered)
        let sink = try #require(bob.channels.incoming.first)
        #expect(sink.outcome == .stored && sink.stored == content)
        Self.noRefusals(alice, bob)
    }

    /// Either side's cancel ends the transfer on both; the receiver's discards what it holds.
    @Test(arguments: [true, false])
    func aCancelEndsTheTransferOnBothSides(receiverCancels: Bool) throws {
        let (network, alice, bob) = try Self.connectedPair()
        bob.channels.reading = false
        let source = try #require(network.sendResource(from: alice, to: bob, content: seededContent(2 << 20, seed: 5)))
        network.run(for: .seconds(1))
        let sink = try #require(bob.channels.incoming.first)
        if receiverCancels { sink.cancel() } else { source.cancel() }
        network.run(for: .seconds(2))
        #expect(source.outcome == .cancelled(.cancelled))
        #expect(sink.outcome == .cancelled(.cancelled))
        #expect(bob.channels.files.isEmpty)
        // Nothing is left open on either side.
        #expect(alice.openChannelDrivers.allSatisfy { $0.mux?.outboundCount == 0 })
        #expect(bob.openChannelDrivers.allSatisfy { $0.mux?.incomingResources == 0 })
        Self.noRefusals(alice, bob)
    }

    /// Storage that fails refuses the offer; resources past the per-peer limit are refused.
    @Test func resourcesPastTheLimitsOrWithoutStorageAreRefused() throws {
        let (network, alice, bob) = try Self.connectedPair()
        bob.channels.reading = false
        let limit = VirtualNetwork.channelLimits.maximumIncomingResourcesPerPeer
        let sources = try (0...limit).map { index in
            try #require(network.sendResource(from: alice, to: bob, content: seededContent(1 << 20, seed: UInt64(index))))
        }
        network.run(for: .seconds(1))
        #expect(sources.prefix(limit).allSatisfy { $0.outcome == nil })
        #expect(sources[limit].outcome == .reset(.refused))
        bob.channels.storageFails = true
        sources.prefix(limit).forEach { $0.cancel() }
        network.run(for: .seconds(1))
        let another = try #require(network.sendResource(from: alice, to: bob, content: [1, 2, 3]))
        network.run(for: .seconds(1))
        #expect(another.outcome == .reset(.refused))
        Self.noRefusals(alice, bob)
    }

    /// A resource cut off by a lost link resumes from the bytes kept, verified against the
    /// digest of the whole content, with no byte hashed twice.
    @Test(arguments: 1...4 as ClosedRange<UInt64>)
    func aResourceCutOffResumesWhereItStopped(seed: UInt64) throws {
        let (network, alice, bob) = try Self.connectedPair(seed: seed)
        let content = seededContent(3 << 20, seed: seed)
        let id = Bytes16(high: seed, low: 42)
        _ = try #require(network.sendResource(from: alice, to: bob, content: content, transferID: id))
        network.run(until: { (bob.channels.incoming.first?.stored.count ?? 0) > 1 << 20 }, limit: .seconds(10))
        let before = bob.channels.incoming.first?.stored.count ?? 0
        #expect(before > 0 && before < content.count)
        // The link is cut: both sides see it end; bob keeps what it stored.
        network.cut(alice, bob)
        #expect(network.run(until: { !alice.isConnected(to: bob) && !bob.isConnected(to: alice) }, limit: .seconds(60)))
        #expect(bob.channels.resumeStore.count == 1)
        try network.connect(alice, to: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }, limit: .seconds(10)))
        let again = try #require(network.sendResource(from: alice, to: bob, content: content, transferID: id))
        #expect(network.run(until: { again.outcome != nil }, limit: .seconds(30)))
        #expect(again.outcome == .delivered)
        #expect(again.startedAt == before)
        let sink = try #require(bob.channels.incoming.last)
        #expect(sink.offset == UInt64(before) && sink.stored == content)
        #expect(bob.channels.hashedBytes == content.count)
        Self.noRefusals(alice, bob)
    }

    /// A peer re-offering a kept transfer and dropping the link, 50 times in a row: each offer
    /// resumes from the same kept bytes (the store keeps one partial, its hash state with it),
    /// and the stand-in receiver is fed no byte twice. (That the shell never reads a kept prefix
    /// back is ResumeCostTests', over sockets.)
    @Test func aKeptTransferReOfferedFiftyTimesResumesFromTheSameBytes() throws {
        let (network, alice, bob) = try Self.connectedPair()
        let content = seededContent(1 << 20, seed: 3)
        let id = Bytes16(high: 9, low: 9)
        _ = try #require(network.sendResource(from: alice, to: bob, content: content, transferID: id))
        network.run(until: { (bob.channels.incoming.first?.stored.count ?? 0) > 300_000 }, limit: .seconds(10))
        network.cut(alice, bob)
        network.run(until: { !bob.isConnected(to: alice) }, limit: .seconds(60))
        let kept = bob.channels.incoming.first?.stored.count ?? 0
        #expect(kept > 300_000)
        let hashed = bob.channels.hashedBytes
        for attempt in 0..<50 {
            try network.connect(alice, to: bob)
            #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }, limit: .seconds(10)))
            let offer = try #require(network.sendResource(from: alice, to: bob, content: content, transferID: id, holdingData: true))
            network.run(for: .milliseconds(100))
            #expect(offer.startedAt == kept, "attempt \(attempt) resumed from \(String(describing: offer.startedAt))")
            network.cut(alice, bob)
            network.run(until: { !bob.isConnected(to: alice) && !alice.isConnected(to: bob) }, limit: .seconds(60))
        }
        #expect(bob.channels.hashedBytes == hashed)
        #expect(bob.channels.resumeStore.count == 1)
        #expect(bob.channels.files.count == 1)
    }
}
