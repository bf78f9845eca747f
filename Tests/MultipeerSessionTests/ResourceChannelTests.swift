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

/// Resources between two engines over loopback (docs/PROTOCOL.md §6.4.14-§6.4.19, §7.8): files,
/// the thread pool, durability and resuming from a real partial file. The rules (admission,
/// limits, cancels, verdicts, resume offsets) are tested on the virtual network,
/// `SessionCoreChannelTests`, and in `ChannelMuxTests`, `ResourceVerdictTests`, `ResumeStoreTests`.
@Suite("Resources over loopback", .serialized)
struct ResourceChannelTests {
    static let pki = try! TestPKI()

    /// A directory of the test's own, removed at the end.
    final class Scratch: Sendable {
        let path: String
        init() throws {
            path = NSTemporaryDirectory() + "mpcp-resource-test-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        var received: String { path + "/received" }
        func file(_ name: String, _ bytes: [UInt8]) throws -> String {
            let file = path + "/" + name
            try Data(bytes).write(to: URL(fileURLWithPath: file))
            return file
        }
        /// What the receiver left in its directory.
        var leftovers: [String] { (try? FileManager.default.contentsOfDirectory(atPath: received)) ?? [] }
    }

    static func pair(
        _ scratch: Scratch, receiver: (inout ChannelConfiguration) -> Void = { _ in }
    ) async throws -> (EngineProbe, EngineProbe) {
        var channels = ChannelConfiguration(resourceDirectory: scratch.received)
        receiver(&channels)
        let alice = try EngineProbe(name: "alice", identity: try pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try pki.peer("bob"), channels: channels)
        try #require(try await alice.connect(bob))
        return (alice, bob)
    }

    static func content(_ count: Int, seed: UInt64) -> [UInt8] { seededContent(count, seed: seed) }

    static func outcome(_ transfer: ResourceTransfer, seconds: Double = 60) async throws -> Result<String?, TransferError> {
        try await withDeadline(seconds: seconds) { await transfer.result() }
    }

    static func send(_ path: String, name: String = "file", from alice: EngineProbe, to bob: EngineProbe, modified: Int64? = nil) throws -> ResourceTransfer {
        try alice.engine.sendResource(atPath: path, named: name, sourceIdentity: "file://" + path, modificationTime: modified, to: bob.peer.identifier)
    }

    @Test(arguments: [0, 65_536, 65_537, 10 << 20])
    func resourcesArriveByteIdenticalAndVerified(size: Int) async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let content = Self.content(size, seed: UInt64(size) + 11)
        let sent = try Self.send(try scratch.file("source", content), name: "photo.jpg", from: alice, to: bob)
        #expect(sent.size == UInt64(size) && sent.direction == .outgoing)
        guard case .success = try await Self.outcome(sent) else {
            // The states tell a lost connection's cause (a deadline, a GOODBYE) from a transfer bug.
            Issue.record("send failed: \(String(describing: sent.outcome)); alice saw \(alice.states(of: bob)), bob saw \(bob.states(of: alice))")
            return
        }
        try #require(try await eventually { bob.finishedResources.count == 1 })
        let (received, result) = bob.finishedResources[0]
        #expect(received.name == "photo.jpg" && received.peer == alice.peer && received.size == UInt64(size))
        let path = try result.get()
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(content))
        #expect(received.completedBytes == UInt64(size) && sent.completedBytes == UInt64(size))
        #expect(bob.startedResources.count == 1)
    }

    /// A resource's name is a label: whatever it says, the file lands in the resource directory
    /// under a name of the receiver's making, and the name reaches the app unchanged.
    @Test func namesNeverChooseThePath() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let names = ["../../etc/passwd", "/etc/shadow", "a\u{0}b", "\u{1}\u{7f}\n\r", "..", "", String(repeating: "é", count: 127)]
        let source = try scratch.file("source", [1, 2, 3])
        for name in names {
            let sent = try Self.send(source, name: name, from: alice, to: bob)
            guard case .success = try await Self.outcome(sent) else { Issue.record("\(name.debugDescription) failed"); continue }
        }
        try #require(try await eventually { bob.finishedResources.count == names.count })
        for ((transfer, result), name) in zip(bob.finishedResources, names) {
            #expect(transfer.name == name)
            let path = try result.get()
            #expect((path as NSString).deletingLastPathComponent == scratch.received, "\(path)")
            #expect((path as NSString).lastPathComponent.hasPrefix(".mpcp-"))
        }
        // Nothing was written anywhere but the resource directory: the scratch directory holds
        // only the source and that directory, which holds only files of the receiver's naming.
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: scratch.path)) == ["source", "received"])
        #expect(scratch.leftovers.allSatisfy { $0.hasPrefix(".mpcp-") && $0.hasSuffix(".part") })
    }

    @Test func anOversizedOfferIsRefused() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch) { $0.maximumIncomingResourceSize = 1_000 }
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let sent = try Self.send(try scratch.file("big", Self.content(1_001, seed: 1)), from: alice, to: bob)
        guard case .failure(let error) = try await Self.outcome(sent) else { Issue.record("an oversized resource went through"); return }
        #expect(error.code == .refusedByPeer)
        #expect(bob.startedResources.isEmpty && scratch.leftovers.isEmpty)
        // One at the limit goes through.
        let fits = try Self.send(try scratch.file("fits", Self.content(1_000, seed: 2)), from: alice, to: bob)
        guard case .success = try await Self.outcome(fits) else { Issue.record("a resource at the limit failed"); return }
    }

    @Test func incomingResourcesAtOnceAreCapped() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch) { $0.maximumConcurrentIncomingResources = 1 }
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        // The first stays in progress (its store waits) until the second has been refused.
        let gate = WriteGate(at: 0)
        bob.engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
        let first = try Self.send(try scratch.file("one", Self.content(8 << 20, seed: 3)), from: alice, to: bob)
        try #require(try await eventually { bob.startedResources.count == 1 && gate.reached })
        let second = try Self.send(try scratch.file("two", [1]), from: alice, to: bob)
        guard case .failure(let error) = try await Self.outcome(second) else { Issue.record("a second resource was taken"); return }
        #expect(error.code == .refusedByPeer)
        gate.open()
        guard case .success = try await Self.outcome(first) else { Issue.record("the first failed"); return }
    }

    /// Cancelling from either side at random offsets stops both sides with a cancellation
    /// and leaves no partial file.
    @Test(arguments: [(1 as UInt64, true), (2, false)])
    func cancellingFromEitherSideStopsBoth(seed: UInt64, senderCancels: Bool) async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let size = 16 << 20
        var generator = SeededGenerator(seed: seed)
        let cutAt = UInt64.random(in: 1...UInt64(size / 2), using: &generator)
        // The receiver's store waits at the cut, so the cancel lands mid-transfer however fast
        // the machine is; it goes on once the cancel is made.
        let gate = WriteGate(at: cutAt)
        bob.engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
        let sent = try Self.send(try scratch.file("source", Self.content(size, seed: seed)), from: alice, to: bob)
        try #require(try await eventually { gate.reached && bob.startedResources.count == 1 })
        if senderCancels { sent.cancel() } else { bob.startedResources[0].cancel() }
        gate.open()
        guard case .failure(let senderError) = try await Self.outcome(sent) else { Issue.record("the transfer went through"); return }
        try #require(try await eventually { bob.finishedResources.count == 1 })
        guard case .failure(let receiverError) = bob.finishedResources[0].1 else { Issue.record("received despite the cancel"); return }
        #expect(senderError.code == (senderCancels ? .cancelled : .cancelledByPeer))
        #expect(receiverError.code == (senderCancels ? .cancelledByPeer : .cancelled))
        try #require(try await eventually { scratch.leftovers.isEmpty }, "left \(scratch.leftovers)")
        #expect(bob.engine.resumeStore.withLock { $0.count } == 0)
        // Bytes queued when it stopped went back to the sender's window: the connection carries
        // the next transfer whole (a leak here would stall it for good).
        bob.engine.storageFault.withLockedValue { $0 = nil }
        let next = try Self.send(try scratch.file("next", Self.content(4 << 20, seed: seed + 50)), from: alice, to: bob)
        guard case .success = try await Self.outcome(next, seconds: 30) else { Issue.record("the next transfer failed: \(String(describing: next.outcome))"); return }
    }

    /// One peer cannot take every incoming place: past its own cap its offers are refused, while
    /// another peer's still go through.
    @Test func onePeerCannotTakeEveryIncomingPlace() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch) { $0.maximumIncomingResourcesPerPeer = 1 }
        let carol = try EngineProbe(name: "carol", identity: try Self.pki.peer("carol"))
        defer { Task { await alice.shutdown(); await bob.shutdown(); await carol.shutdown() } }
        try #require(try await bob.connect(carol))
        let gate = WriteGate(at: 0)
        bob.engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
        let first = try Self.send(try scratch.file("one", Self.content(1 << 20, seed: 61)), from: alice, to: bob)
        try #require(try await eventually { gate.reached })
        let second = try Self.send(try scratch.file("two", [1]), from: alice, to: bob)
        guard case .failure(let error) = try await Self.outcome(second) else { Issue.record("a second resource from one peer was taken"); return }
        #expect(error.code == .refusedByPeer)
        let fromCarol = try Self.send(try scratch.file("three", [2]), from: carol, to: bob)
        gate.open()
        guard case .success = try await Self.outcome(fromCarol) else { Issue.record("another peer's resource was refused"); return }
        guard case .success = try await Self.outcome(first) else { Issue.record("the first failed"); return }
    }

    @Test func aStorageFailureFailsBothSidesAndLeavesNoFile() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        bob.engine.storageFault.withLockedValue {
            $0 = { offset in if offset >= 1 << 20 { throw FileIOError(operation: "write", code: 28) } }  // ENOSPC
        }
        let sent = try Self.send(try scratch.file("source", Self.content(4 << 20, seed: 9)), from: alice, to: bob)
        guard case .failure(let senderError) = try await Self.outcome(sent) else { Issue.record("stored despite the fault"); return }
        #expect(senderError.code == .storageFailure && senderError.peerCode == 3)
        try #require(try await eventually { bob.finishedResources.count == 1 })
        guard case .failure(let receiverError) = bob.finishedResources[0].1 else { Issue.record("reported as stored"); return }
        #expect(receiverError.code == .storageFailure)
        try #require(try await eventually { scratch.leftovers.isEmpty }, "left \(scratch.leftovers)")
    }

    /// A full mesh of 8: every member sends a resource to the next and opens a stream to the one
    /// after, all at once (8 resources and 8 streams in flight on different connections).
    @Test func eightConcurrentTransfersAcrossAMeshOfEight() async throws {
        let scratch = try Scratch()
        let peers = try (0..<8).map { index in
            try EngineProbe(name: "peer\(index)", identity: try Self.pki.peer("peer\(index)"),
                            channels: ChannelConfiguration(resourceDirectory: scratch.received + "\(index)"))
        }
        defer { Task { for peer in peers { await peer.shutdown() } } }
        for (index, listener) in peers.enumerated() {
            for dialer in peers[(index + 1)...] { try await listener.accept(dialer) }
        }
        try #require(try await eventually(seconds: 20) { peers.allSatisfy { $0.engine.connectedPeers.count == 7 } })
        let contents = (0..<8).map { Self.content(3 << 20, seed: 100 + UInt64($0)) }
        var transfers: [ResourceTransfer] = []
        var writing: [Task<Void, any Error>] = []
        for (index, peer) in peers.enumerated() {
            let next = peers[(index + 1) % 8]
            transfers.append(try Self.send(try scratch.file("source\(index)", contents[index]), name: "from\(index)", from: peer, to: next))
            let writer = try peer.engine.openStream(named: "s\(index)", to: peers[(index + 2) % 8].peer.identifier)
            let content = contents[index]
            writing.append(Task {
                try await writer.write(ByteBuffer(bytes: content))
                writer.close()
            })
        }
        for transfer in transfers {
            guard case .success = try await Self.outcome(transfer) else { Issue.record("\(transfer.name) failed: \(String(describing: transfer.outcome))"); return }
        }
        for (index, peer) in peers.enumerated() {
            let receiver = peers[(index + 1) % 8]
            try #require(try await eventually { receiver.finishedResources.contains { $0.0.peer == peer.peer } })
            let path = try #require(try receiver.finishedResources.first { $0.0.peer == peer.peer }?.1.get())
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(contents[index]))
            let streamReceiver = peers[(index + 2) % 8]
            try #require(try await eventually { streamReceiver.openedStreams.contains { $0.peer == peer.peer } })
            let reader = try #require(streamReceiver.openedStreams.first { $0.peer == peer.peer })
            let bytes = try await withDeadline(seconds: 30) {
                var bytes: [UInt8] = []
                for try await chunk in reader { bytes += chunk.readableBytesView }
                return bytes
            }
            #expect(bytes == contents[index])
        }
        for task in writing { try await task.value }
    }

    /// Cut the connection at random points, reconnect, send again: the transfer resumes where the
    /// receiver's file ended, and the result is byte-identical.
    @Test(arguments: [21 as UInt64])
    func anInterruptedTransferResumes(seed: UInt64) async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let size = 12 << 20
        let content = Self.content(size, seed: seed)
        let source = try scratch.file("source", content)
        var generator = SeededGenerator(seed: seed)
        let cutAt = UInt64.random(in: 1 << 20...UInt64(size) - (1 << 20), using: &generator)
        // The receiver's store stops at the cut until the connection is gone, so the cut lands
        // mid-transfer however fast the machine is.
        let gate = WriteGate(at: cutAt)
        bob.engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
        let first = try Self.send(source, from: alice, to: bob)
        try #require(try await eventually { gate.reached })
        await alice.shutdown()
        gate.open()
        guard case .failure(let cut) = try await Self.outcome(first) else { Issue.record("finished before the cut"); return }
        #expect(cut.code == .connectionLost)
        // Alice's GOODBYE may sit behind chunks bob stopped reading while his store was held:
        // then her close reads as a lost link, and bob gives up only when his 10 s grace passes.
        try #require(try await eventually(seconds: 30) { bob.finishedResources.count == 1 })
        #expect(bob.engine.resumeStore.withLock { $0.count } == 1)

        try #require(try await alice.connect(bob))
        let second = try Self.send(source, from: alice, to: bob)
        guard case .success = try await Self.outcome(second) else { Issue.record("the resumed send failed: \(String(describing: second.outcome))"); return }
        try #require(try await eventually { bob.finishedResources.count == 2 })
        let resumed = bob.startedResources[1]
        let path = try bob.finishedResources[1].1.get()
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(content))
        // It started where the first attempt's file ended, not at zero.
        #expect(bob.resumeOffsets.last ?? 0 >= cutAt, "resumed at \(bob.resumeOffsets)")
        #expect(resumed.completedBytes == UInt64(size))
        #expect(bob.engine.resumeStore.withLock { $0.count } == 0)
    }

    /// The digest covers the kept prefix too: content that changed under the same transfer ID
    /// fails the check (no file), and the next attempt starts from zero and succeeds.
    @Test func aResumeOverChangedContentFailsTheCheckThenStartsOver() async throws {
        let scratch = try Scratch()
        let (alice, bob) = try await Self.pair(scratch)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let size = 8 << 20
        var content = Self.content(size, seed: 5)
        let source = try scratch.file("source", content)
        let gate = WriteGate(at: 2 << 20)
        bob.engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
        let first = try Self.send(source, from: alice, to: bob, modified: 42)
        try #require(try await eventually { gate.reached })
        await alice.shutdown()
        gate.open()
        _ = try await Self.outcome(first)
        try #require(try await eventually { bob.engine.resumeStore.withLock { $0.count } == 1 })
        content[0] ^= 0xFF  // the kept prefix no longer matches
        _ = try scratch.file("source", content)
        try #require(try await alice.connect(bob))
        let second = try Self.send(source, from: alice, to: bob, modified: 42)
        guard case .failure(let error) = try await Self.outcome(second) else { Issue.record("a mixed file passed the check"); return }
        #expect(error.code == .integrityFailure)
        try #require(try await eventually { bob.finishedResources.count == 2 })
        let third = try Self.send(source, from: alice, to: bob, modified: 42)
        guard case .success = try await Self.outcome(third) else { Issue.record("the fresh attempt failed"); return }
        try #require(try await eventually { bob.finishedResources.count == 3 })
        #expect(bob.resumeOffsets.last == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: try bob.finishedResources[2].1.get())) == Data(content))
    }
}
