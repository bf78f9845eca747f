import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Named byte streams between two engines over loopback (docs/PROTOCOL.md §6.4.9-§6.4.13, §7.6):
/// that the shell's endpoints, sockets and threads carry out what the core decides. The rules
/// themselves (windows, turns, refusals, cancels, limits) are tested on the virtual network,
/// `SessionCoreChannelTests`, and in `ChannelMuxTests`.
@Suite("Streams over loopback", .serialized)
struct StreamChannelTests {
    static let pki = try! TestPKI()

    static func pair(_ preference: WireEncryptionPreference = .required) async throws -> (EngineProbe, EngineProbe) {
        let alice = try EngineProbe(name: "alice", preference: preference, identity: try pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", preference: preference, identity: try pki.peer("bob"))
        try #require(try await alice.connect(bob))
        return (alice, bob)
    }

    static func content(_ count: Int, seed: UInt64) -> [UInt8] { seededContent(count, seed: seed) }

    /// Writes `content` in uneven pieces, so frame and buffer boundaries fall everywhere.
    static func writeInPieces(_ content: [UInt8], to writer: ByteStreamWriter, seed: UInt64) async throws {
        var generator = SeededGenerator(seed: seed)
        var offset = 0
        while offset < content.count {
            let piece = min(Int.random(in: 1...100_000, using: &generator), content.count - offset)
            try await writer.write(ByteBuffer(bytes: content[offset..<offset + piece]))
            offset += piece
        }
    }

    /// Reads the whole stream with a deadline.
    static func readAll(_ reader: ByteStreamReader, seconds: Double = 30) async throws -> [UInt8] {
        try await withDeadline(seconds: seconds) {
            var bytes: [UInt8] = []
            for try await chunk in reader { bytes += chunk.readableBytesView }
            return bytes
        }
    }

    @Test(arguments: [0, 65_537, 10 << 20])
    func streamsArriveByteIdentical(size: Int) async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let content = Self.content(size, seed: UInt64(size))
        let writer = try alice.engine.openStream(named: "bulk-\(size)", to: bob.peer.identifier)
        let writing = Task {
            try await Self.writeInPieces(content, to: writer, seed: 7)
            writer.close()
        }
        try #require(try await eventually { bob.openedStreams.count == 1 })
        let reader = bob.openedStreams[0]
        #expect(reader.name == "bulk-\(size)" && reader.peer == alice.peer)
        let received = try await Self.readAll(reader)
        try await writing.value
        #expect(received.count == content.count)
        #expect(received == content)
    }

    /// A reader that stops reading stops the writer: the reader holds at most the channel's
    /// window and the writer at most its buffer; reading again lets everything through.
    @Test func aStalledReaderStopsTheWriterWithBoundedMemory() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let total = 12 << 20
        let content = Self.content(total, seed: 3)
        let writer = try alice.engine.openStream(named: "stall", to: bob.peer.identifier)
        let written = ManagedCounter()
        let writing = Task {
            for start in stride(from: 0, to: total, by: 32_768) {
                try await writer.write(ByteBuffer(bytes: content[start..<min(start + 32_768, total)]))
                written.add(32_768)
            }
            writer.close()
        }
        try #require(try await eventually { bob.openedStreams.count == 1 })
        let reader = bob.openedStreams[0]
        // The writer gets no further than the reader's window plus its buffer, and stays there.
        let window = Int(bob.engine.configuration.channels.channelReceiveWindow)
        let bound = window + writer.bufferLimit + 32_768
        try #require(try await eventually { reader.bufferedByteCount == window })
        let stalledAt = written.value
        #expect(stalledAt <= bound, "wrote \(stalledAt) with nothing read")
        #expect(writer.bufferedByteCount <= writer.bufferLimit)
        // The reader stalls for five seconds (the scenario, not the evidence): the bounds hold
        // throughout, checked as it goes.
        let stallEnds = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < stallEnds {
            #expect(written.value <= bound && reader.bufferedByteCount <= window)
            #expect(writer.bufferedByteCount <= writer.bufferLimit)
            try await Task.sleep(for: .milliseconds(100))
        }
        let received = try await Self.readAll(reader)
        try await writing.value
        #expect(received == content)
    }

    /// A reader that refuses the stream while bytes still wait for its window: `finish()`
    /// throws, where `close()` alone would leave the writer believing it got through.
    @Test func finishReportsAStreamTheReaderRefused() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let writer = try alice.engine.openStream(named: "refused", to: bob.peer.identifier)
        // More than the channel's window: the rest waits in the writer's buffer.
        let window = Int(bob.engine.configuration.channels.channelReceiveWindow)
        let total = window + min(writer.bufferLimit, 64 << 10)
        try await writer.write(ByteBuffer(bytes: Self.content(total, seed: 9)))
        try #require(try await eventually { bob.openedStreams.count == 1 })
        bob.openedStreams[0].cancel()
        let outcome = try await withDeadline(seconds: 10) { () -> TransferError? in
            do {
                try await writer.finish()
                return nil
            } catch {
                return error as? TransferError ?? TransferError(.connectionLost)
            }
        }
        #expect(outcome != nil, "finish() returned as if the refused stream got through")
    }

    @Test func theWriterCancellingFailsTheReader() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let writer = try alice.engine.openStream(named: "c", to: bob.peer.identifier)
        try await writer.write(ByteBuffer(bytes: [1, 2, 3]))
        try #require(try await eventually { bob.openedStreams.first?.hasBytesAvailable == true })
        writer.cancel()
        let reader = bob.openedStreams[0]
        let outcome = try await withDeadline(seconds: 10) { () -> TransferError? in
            do {
                for try await _ in reader {}
                return nil
            } catch {
                return error as? TransferError
            }
        }
        #expect(outcome?.code == .cancelledByPeer)
    }

    @Test func theReaderCancellingFailsTheWriter() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let writer = try alice.engine.openStream(named: "c", to: bob.peer.identifier)
        try await writer.write(ByteBuffer(bytes: [1]))
        try #require(try await eventually { bob.openedStreams.count == 1 })
        bob.openedStreams[0].cancel()
        try #require(try await eventually { writer.failure != nil })
        #expect(writer.failure?.code == .cancelledByPeer)
        await #expect(throws: TransferError.self) { try await writer.write(ByteBuffer(bytes: [2])) }
    }

    @Test func aLostConnectionFailsBothEnds() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let writer = try alice.engine.openStream(named: "lost", to: bob.peer.identifier)
        try await writer.write(ByteBuffer(bytes: [1]))
        try #require(try await eventually { bob.openedStreams.count == 1 })
        await bob.shutdown()
        try #require(try await eventually { writer.failure != nil })
        #expect(writer.failure?.code == .connectionLost)
        try #require(try await eventually { bob.openedStreams[0].failure != nil })
        #expect(bob.openedStreams[0].failure?.code == .connectionLost)
    }

    /// 64 of our channels open to a peer is the limit; a closed one frees its place.
    @Test func sixtyFourOpenStreamsAreTheLimit() async throws {
        let (alice, bob) = try await Self.pair(.none)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        var writers: [ByteStreamWriter] = []
        for index in 0..<WireLimits.maxChannelsOpenedPerSide {
            writers.append(try alice.engine.openStream(named: "s\(index)", to: bob.peer.identifier))
        }
        #expect(throws: TransferError.self) { try alice.engine.openStream(named: "one too many", to: bob.peer.identifier) }
        writers[0].close()
        let another = try await withDeadline(seconds: 10) { () -> ByteStreamWriter in
            while true {
                if let writer = try? alice.engine.openStream(named: "again", to: bob.peer.identifier) { return writer }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        #expect(another.name == "again")
        try #require(try await eventually { bob.openedStreams.count == 65 })
    }

    /// A stalled reader holds its channel's window only: another stream to the same peer flows.
    @Test func aStalledStreamDoesNotBlockTheOthers() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let stalled = try alice.engine.openStream(named: "stalled", to: bob.peer.identifier)
        let stalledWriting = Task { try await stalled.write(ByteBuffer(bytes: Self.content(4 << 20, seed: 1))) }
        try #require(try await eventually { bob.openedStreams.first?.bufferedByteCount == Int(bob.engine.configuration.channels.channelReceiveWindow) })
        let content = Self.content(3 << 20, seed: 2)
        let other = try alice.engine.openStream(named: "other", to: bob.peer.identifier)
        let writing = Task {
            try await other.write(ByteBuffer(bytes: content))
            other.close()
        }
        try #require(try await eventually { bob.openedStreams.count == 2 })
        #expect(try await Self.readAll(bob.openedStreams[1]) == content)
        try await writing.value
        stalledWriting.cancel()
        bob.openedStreams[0].cancel()
    }

    /// A window larger than the socket's write buffer (1 MiB) fills while its reader stalls: the
    /// socket turning writable during the engine's own flush is not lost (it was, and the stream
    /// stopped at 1 MiB with window and data left, since no window update would come).
    @Test func aWindowLargerThanTheSocketBufferFillsWhileTheReaderStalls() async throws {
        let window = 4 << 20
        let channels = ChannelConfiguration(
            streamBufferLimit: window, channelReceiveWindow: UInt32(window), connectionReceiveWindow: UInt32(2 * window))
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"), channels: channels)
        let bob = try EngineProbe(name: "bob", identity: try Self.pki.peer("bob"), channels: channels)
        try #require(try await alice.connect(bob))
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let writer = try alice.engine.openStream(named: "stalled", to: bob.peer.identifier)
        let writing = Task { try await writer.write(ByteBuffer(bytes: Self.content(2 * window, seed: 4))) }
        let filled = try await eventually { bob.openedStreams.first?.bufferedByteCount == window }
        #expect(filled, "the reader holds \(bob.openedStreams.first?.bufferedByteCount ?? 0) of \(window) bytes")
        writing.cancel()
        bob.openedStreams.first?.cancel()
    }

    /// A reader that stops early after a writer wrote and closed gives the unread bytes' window
    /// back: the next stream on the connection goes through whole.
    @Test func unreadBytesAreGivenBackWhenTheReaderLetsGo() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        let first = try alice.engine.openStream(named: "first", to: bob.peer.identifier)
        try await first.write(ByteBuffer(bytes: Self.content(200_000, seed: 3)))
        first.close()
        try #require(try await eventually { bob.openedStreams.first?.isAtEnd == false && bob.openedStreams.first?.bufferedByteCount == 200_000 })
        var ten = [UInt8](repeating: 0, count: 10)
        #expect(ten.withUnsafeMutableBytes { bob.openedStreams[0].read(into: $0) } == 10)
        bob.openedStreams[0].cancel()
        for round in 0..<4 {
            let content = Self.content(1 << 20, seed: 10 + UInt64(round))
            let next = try alice.engine.openStream(named: "next\(round)", to: bob.peer.identifier)
            let writing = Task {
                try await next.write(ByteBuffer(bytes: content))
                next.close()
            }
            try #require(try await eventually { bob.openedStreams.count == 2 + round })
            #expect(try await Self.readAll(bob.openedStreams[1 + round]) == content)
            try await writing.value
        }
    }

    @Test func openingToAStrangerOrWithALongNameIsRefusedAtOnce() async throws {
        let (alice, bob) = try await Self.pair(.none)
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        #expect(throws: TransferError(.notConnected)) { try alice.engine.openStream(named: "x", to: Bytes16.random()) }
        #expect(throws: TransferError.self) { try alice.engine.openStream(named: String(repeating: "n", count: 256), to: bob.peer.identifier) }
    }
}

/// A counter shared with a task.
final class ManagedCounter: Sendable {
    private let count = Mutex(0)
    func add(_ value: Int) { count.withLock { $0 += value } }
    var value: Int { count.withLock { $0 } }
}
