import Foundation
import MultipeerCrypto
@testable import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// What a peer can make the receiver spend on a partial it keeps for resuming (docs/PROTOCOL.md
/// §7.8, issue 28): offers of a kept transfer cost no re-reading, and kept files go on time.
@Suite("Resume cost", .serialized)
struct ResumeCostTests {
    typealias Scratch = ResourceChannelTests.Scratch

    static func receiver(_ scratch: Scratch, lifetime: TimeAmount = .minutes(10)) throws -> EngineProbe {
        // Windows wide enough for a raw peer to send the whole partial without reading returns.
        try EngineProbe(name: "bob", channels: ChannelConfiguration(
            channelReceiveWindow: 4 << 20, connectionReceiveWindow: 8 << 20, resourceDirectory: scratch.received,
            resumeLifetime: lifetime))
    }

    /// Runs `body` with a receiver and shuts it down after, whether or not the body threw.
    static func withReceiver(
        _ scratch: Scratch, lifetime: TimeAmount = .minutes(10), _ body: (EngineProbe) async throws -> Void
    ) async throws {
        let bob = try receiver(scratch, lifetime: lifetime)
        do {
            try await body(bob)
        } catch {
            await bob.shutdown()
            throw error
        }
        await bob.shutdown()
    }

    static func isWindow(_ frame: Frame, channel: UInt32) -> Bool {
        if case .windowUpdate(channel, _) = frame { return true }
        return false
    }

    static func isGone(_ bob: EngineProbe, _ peer: Bytes16) -> Bool {
        if case .notConnected = bob.lastState(ofPeer: peer) { return true }
        return false
    }

    /// A raw peer joins as `peer`, offers `offer` on channel 1 and waits for the answer.
    static func offer(_ offer: ResourceOffer, to bob: EngineProbe, as peer: Bytes16, expecting offset: UInt64) async throws -> RawMember {
        let member = try await RawMember.join(bob, name: "mallory", identifier: peer)
        try #require(try await eventually { bob.lastState(ofPeer: peer) == .connected })
        try await Self.offer(offer, from: member, expecting: offset)
        return member
    }

    /// `member` offers `offer` on channel 1 and waits for the acceptance and both windows.
    static func offer(_ offer: ResourceOffer, from member: RawMember, expecting offset: UInt64) async throws {
        try await member.channel.writeAndFlush(Frame.resourceOffer(channel: 1, offer)).get()
        try #require(try await member.log.wait { log in
            log.frames.contains(.resourceAccept(channel: 1, offset: offset))
                && log.frames.contains { isWindow($0, channel: 0) } && log.frames.contains { isWindow($0, channel: 1) }
        })
    }

    /// `member` sends `count` bytes on channel 1, and no more: a sender paused mid-transfer.
    static func send(_ count: Int, from member: RawMember) {
        var sent = 0
        while sent < count {
            let chunk = min(65_536, count - sent)
            member.channel.write(Frame.resourceChunk(channel: 1, ByteBuffer(repeating: 0x5A, count: chunk)), promise: nil)
            sent += chunk
        }
        member.channel.flush()
    }

    /// The connection drops; Bob keeps what reached its file.
    static func drop(_ member: RawMember, from bob: EngineProbe) async throws {
        try await member.channel.close()
        try #require(try await eventually { isGone(bob, member.peer.identifier) && bob.engine.resumeStore.withLock { $0.count } == 1 })
    }

    /// A raw peer sends `kept` bytes of `offer` and drops the connection: Bob keeps them.
    static func leavePartial(_ offer: ResourceOffer, kept: Int, in bob: EngineProbe, as peer: Bytes16) async throws {
        let member = try await Self.offer(offer, to: bob, as: peer, expecting: 0)
        Self.send(kept, from: member)
        try #require(try await eventually { bob.startedResources.last?.completedBytes == UInt64(kept) })
        try await drop(member, from: bob)
    }

    /// Issue 28: every resume re-read and re-hashed the kept prefix, so a peer that offered a kept
    /// transfer and dropped the connection, over and over, cost the receiver the whole prefix
    /// each time. Fifty offers of a kept 4 MiB partial must cost less than reading it twice.
    /// Every read of a file in the resource directory counts, through whatever handle.
    @Test func reofferingAKeptPartialDoesNotReadItAgain() async throws {
        let scratch = try Scratch()
        let readBack = Atomic<Int>(0)
        FileReads.watch(scratch.received) { readBack.add($0, ordering: .relaxed) }
        defer { FileReads.unwatch(scratch.received) }
        try await Self.withReceiver(scratch) { bob in
            let mallory = Bytes16.random()
            let kept = 4 << 20
            let offer = try ResourceOffer(size: UInt64(kept) + 1, transferID: .random(), name: "bait", resumed: false, sendID: .random(in: .min ... .max))
            try await Self.leavePartial(offer, kept: kept, in: bob, as: mallory)
            for _ in 0..<50 {
                let member = try await Self.offer(offer, to: bob, as: mallory, expecting: UInt64(kept))
                try await Self.drop(member, from: bob)
            }
            let read = readBack.load(ordering: .relaxed)
            #expect(read < 2 * kept, "50 resumes read \(read) bytes of a \(kept)-byte partial")
        }
    }

    /// SECURITY.md: kept partials expire. Before, expiry ran only on the next keep or take, so a
    /// partial stayed on disk for as long as nobody sent another resource.
    @Test func aKeptPartialLeavesTheDiskAfterItsLifetimeWithoutTraffic() async throws {
        let scratch = try Scratch()
        try await Self.withReceiver(scratch, lifetime: .seconds(2)) { bob in
            let offer = try ResourceOffer(size: 1 << 20, transferID: .random(), name: "left", resumed: false, sendID: .random(in: .min ... .max))
            try await Self.leavePartial(offer, kept: 65_536, in: bob, as: .random())
            #expect(scratch.leftovers.count == 1)
            #expect(try await eventually(seconds: 15) { scratch.leftovers.isEmpty }, "still there: \(scratch.leftovers)")
            #expect(bob.engine.resumeStore.withLock { $0.count } == 0)
        }
    }

    /// MCSession's deinit submits a disconnect to the loop and discards the kept partials at
    /// once. Before, the disconnect cut the transfer off after the discard and kept its partial,
    /// with a timer that would find the engine gone: the file outlived the session.
    @Test func aSessionGoingAwayMidTransferLeavesNoPartial() async throws {
        let scratch = try Scratch()
        try await Self.withReceiver(scratch) { bob in
            let offer = try ResourceOffer(size: 1 << 20, transferID: .random(), name: "cut", resumed: false, sendID: .random(in: .min ... .max))
            let member = try await Self.offer(offer, to: bob, as: .random(), expecting: 0)
            defer { member.channel.close(promise: nil) }
            Self.send(65_536, from: member)
            // Written and reported: no write is in flight, and the sender sends no more.
            try #require(try await eventually { bob.startedResources.last?.completedBytes == 65_536 })
            #expect(scratch.leftovers.count == 1)
            // As MCSession's deinit does.
            _ = bob.engine.disconnect()
            bob.engine.discardResumableTransfers()
            #expect(try await eventually(seconds: 10) { scratch.leftovers.isEmpty }, "still there: \(scratch.leftovers)")
        }
    }

    /// An engine dropped mid-transfer without discarding: the disconnect keeps the partial, the
    /// expiry timer holds the engine weakly and never runs. Before, the file stayed on disk.
    @Test func anEngineDroppedMidTransferLeavesNoPartial() async throws {
        let scratch = try Scratch()
        let started = Mutex<ResourceTransfer?>(nil)
        let peer = try WirePeerID(identifier: .random(), displayName: "bob")
        var bob: SessionEngine? = SessionEngine(
            configuration: SessionEngineConfiguration(
                localPeer: peer, encryptionPreference: .required, tls: try TLSContext(identity: nil), listenHost: "127.0.0.1",
                channels: ChannelConfiguration(resourceDirectory: scratch.received), logger: EngineProbe.logger("bob")),
            onEvent: { event in
                switch event {
                case .resourceStarted(let transfer): started.withLock { $0 = transfer }
                case .trustRequested(_, let answer): answer(true)
                case .messageReceived(_, _, let receipt): receipt.consumed()
                default: break
                }
            })
        weak let weakBob = bob
        let member = try await RawMember.join(engine: try #require(bob), name: "mallory")
        defer { member.channel.close(promise: nil) }
        try await Self.offer(try ResourceOffer(size: 1 << 20, transferID: .random(), name: "cut", resumed: false, sendID: .random(in: .min ... .max)), from: member, expecting: 0)
        Self.send(65_536, from: member)
        try #require(try await eventually { started.withLock { $0 }?.completedBytes == 65_536 })
        #expect(scratch.leftovers.count == 1)
        _ = bob?.disconnect()
        bob = nil
        try #require(try await eventually(seconds: 10) { weakBob == nil }, "the engine was not freed")
        #expect(try await eventually(seconds: 10) { scratch.leftovers.isEmpty }, "still there: \(scratch.leftovers)")
    }
}
