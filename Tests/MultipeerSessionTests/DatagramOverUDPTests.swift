import Foundation
import MultipeerCrypto
@testable import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// Records whatever arrives on a UDP socket of the test's own, with its sender.
final class DatagramRecorder: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    private let senders = Mutex<[SocketAddress]>([])

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let sender = unwrapInboundIn(data).remoteAddress
        senders.withLock { $0.append(sender) }
    }

    var all: [SocketAddress] { senders.withLock { $0 } }

    /// Everything that reached `socket` (which this recorder reads) before a marker sent to it
    /// now from a socket of its own. Loopback queues a datagram at its receiver as it is sent, and
    /// a socket's queue is read in order: once the marker is in, whatever was sent to `socket`
    /// before it has been read. No sleeping and hoping that a reply would have come by then.
    func arrivalsBeforeMarker(on socket: any Channel, group: any EventLoopGroup) async throws -> [SocketAddress] {
        let marker = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let markerAddress = try #require(marker.localAddress)
        let destination = try #require(socket.localAddress)
        var arrived = false
        for _ in 0..<10 where !arrived {
            try await marker.writeAndFlush(AddressedEnvelope(remoteAddress: destination, data: ByteBuffer(string: "marker")))
            arrived = try await eventually(seconds: 2) { self.all.contains(markerAddress) }
        }
        try await marker.close().get()
        try #require(arrived, "the marker never reached the socket")
        return Array(all.prefix { $0 != markerAddress })
    }
}

/// Takes Alice's place as the receiver of Bob's datagrams, so a test can hold them back, replay
/// and reorder them over real UDP. Bob dials Alice through a TCP relay on 127.0.0.2: he then
/// addresses her datagrams to 127.0.0.2 at her datagram port (docs/PROTOCOL.md §8: the peer's
/// address as the connection saw it), where the tap listens; Alice herself listens on 127.0.0.1.
final class DatagramTap: Sendable {
    private final class Capture: ChannelInboundHandler, Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        let datagrams = Mutex<[ByteBuffer]>([])
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let datagram = unwrapInboundIn(data).data
            datagrams.withLock { $0.append(datagram) }
        }
    }

    private let capture: Capture
    private let relay: TCPRelay
    private let socket: any Channel

    /// Connects `bob` to `alice` with the tap in between for Bob's datagrams.
    static func connect(_ bob: EngineProbe, to alice: EngineProbe) async throws -> DatagramTap {
        let data = try await alice.engine.connectionData(forPeer: bob.peer.identifier).get()
        let port = try #require(try await alice.engine.datagramPort.get())
        let relay = try await TCPRelay(to: Int(data.endpoints[0].port), host: "127.0.0.2")
        let capture = Capture()
        let socket = try await DatagramBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(capture) }
            }
            .bind(host: "127.0.0.2", port: port).get()
        let tap = DatagramTap(relay: relay, socket: socket, capture: capture)
        bob.engine.connect(to: try relay.rewrite(data))
        try #require(try await eventually { alice.isConnected(to: bob) && bob.isConnected(to: alice) })
        return tap
    }

    private init(relay: TCPRelay, socket: any Channel, capture: Capture) {
        self.relay = relay
        self.socket = socket
        self.capture = capture
    }

    var datagrams: [ByteBuffer] { capture.datagrams.withLock { $0 } }

    /// Has `bob` send `count` datagrams (the message of each named by `message`) and waits until
    /// the tap holds them all, in chunks small enough that no socket buffer on the way overflows.
    func capture(_ count: Int, from bob: EngineProbe, to alice: EngineProbe, message: (Int) -> String) async throws -> [ByteBuffer] {
        let start = datagrams.count
        for chunkStart in stride(from: 0, to: count, by: 200) {
            let chunkEnd = min(chunkStart + 200, count)
            for index in chunkStart..<chunkEnd {
                try bob.engine.sendUnreliable(ByteBuffer(string: message(index)), to: [alice.peer.identifier])
            }
            try #require(try await eventually { self.datagrams.count >= start + chunkEnd }, "the tap lost datagrams")
        }
        return Array(datagrams[start...])
    }

    func close() async {
        try? await socket.close().get()
        await relay.close()
    }
}

/// Sends genuine datagrams from `socket` until `receiver` has delivered each one's message (a copy
/// lost on the way is sent again; a second copy of one that arrived is a replay, which is dropped).
/// One socket's datagrams reach another in order on loopback, so once they are in, everything
/// `socket` sent before them has been read and judged too.
func deliver(
    _ datagrams: [(datagram: ByteBuffer, message: String)], from socket: any Channel, to target: SocketAddress,
    receiver: EngineProbe, sender: EngineProbe
) async throws {
    // Only messages that arrive from now on count, and each is looked at once.
    var scanned = receiver.messages(from: sender).count
    var arrived = Set<String>()
    func allArrived() -> Bool {
        let messages = receiver.messages(from: sender)
        for message in messages.dropFirst(scanned) { arrived.insert(String(buffer: message)) }
        scanned = messages.count
        return datagrams.allSatisfy { arrived.contains($0.message) }
    }
    for _ in 0..<10 where !allArrived() {
        let missing = datagrams.filter { !arrived.contains($0.message) }
        for item in missing.dropLast() {
            socket.write(AddressedEnvelope(remoteAddress: target, data: item.datagram), promise: nil)
        }
        try await socket.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: missing.last!.datagram))
        _ = try await eventually(seconds: 2) { allArrived() }
    }
    let missing = datagrams.filter { !arrived.contains($0.message) }.map(\.message)
    try #require(missing.isEmpty, "genuine datagrams never delivered: \(missing.prefix(10))")
}

@Suite("Datagrams over UDP on loopback", .serialized)
struct DatagramOverUDPTests {
    static let pki = try! TestPKI()

    @Test(arguments: [true, false])
    func unreliableMessagesArriveOnceAndAuthentic(encrypted: Bool) async throws {
        let alice = try EngineProbe(name: "alice", preference: encrypted ? .required : .none)
        let bob = try EngineProbe(name: "bob", preference: encrypted ? .required : .none)
        #expect(try await alice.connect(bob))
        for index in 0..<300 {
            try bob.engine.sendUnreliable(ByteBuffer(string: "datagram \(index)"), to: [alice.peer.identifier])
            // Paced, so the loopback socket buffers are not the thing under test.
            if index % 10 == 9 { try await Task.sleep(for: .milliseconds(2)) }
        }
        // An end marker leaves Bob's socket after them, and loopback keeps one socket's order: once
        // a marker is in, Alice has judged every datagram before it (a lost marker gets a successor).
        var ended = false
        for attempt in 0..<10 where !ended {
            try bob.engine.sendUnreliable(ByteBuffer(string: "end \(attempt)"), to: [alice.peer.identifier])
            ended = try await eventually(seconds: 2) { alice.messages(from: bob).contains { String(buffer: $0).hasPrefix("end ") } }
        }
        try #require(ended, "no end marker arrived")
        let received = alice.messages(from: bob).map { String(buffer: $0) }.filter { !$0.hasPrefix("end ") }
        #expect(received.count >= 240, "loopback lost \(300 - received.count) of 300")
        #expect(Set(received).count == received.count, "a datagram was delivered twice")
        #expect(received.allSatisfy { $0.hasPrefix("datagram ") })
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Datagrams up to the configured limit arrive whole (NIO's default receive buffer is smaller).
    @Test func largeDatagramsArriveWhole() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        #expect(try await alice.connect(bob))
        let sizes = [2_047, 2_049, 4_096, 8_192]
        for size in sizes {
            try bob.engine.sendUnreliable(ByteBuffer(repeating: UInt8(size % 251), count: size), to: [alice.peer.identifier])
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(try await eventually { alice.messages(from: bob).count == sizes.count })
        #expect(alice.messages(from: bob).map(\.readableBytes).sorted() == sizes)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A burst is written in batches and flushed as it goes: datagrams queued together must not
    /// push the channel over its write-buffer mark and drop their own tail.
    @Test func aBurstOfLargeDatagramsIsNotDroppedByItsOwnBatch() async throws {
        let (alice, bob) = try await Self.connectedPair()
        let count = 40
        for index in 0..<count {
            try bob.engine.sendUnreliable(ByteBuffer(repeating: UInt8(index), count: 8_192), to: [alice.peer.identifier])
        }
        #expect(try await eventually { alice.messages(from: bob).count == count })
        #expect(Set(alice.messages(from: bob).map { $0.getInteger(at: $0.readerIndex, as: UInt8.self) }) == Set((0..<count).map(UInt8.init)))
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Alice and Bob with certificates, connected over TLS.
    static func connectedPair(segmentationOffload: Bool = true) async throws -> (alice: EngineProbe, bob: EngineProbe) {
        let alice = try EngineProbe(name: "alice", identity: try pki.peer("alice"), segmentationOffload: segmentationOffload)
        let bob = try EngineProbe(name: "bob", identity: try pki.peer("bob"), segmentationOffload: segmentationOffload)
        try #require(try await alice.connect(bob))
        return (alice, bob)
    }

    /// Queues `count` unreliable messages of `size` bytes (each starting with its index) from
    /// `bob` to `alice` while Bob's loop is held, so the whole burst is drained in one pass.
    static func burst(_ count: Int, of size: Int, from bob: EngineProbe, to alice: EngineProbe, startingAt first: Int = 0) throws {
        let queued = DispatchSemaphore(value: 0)
        bob.engine.eventLoop.execute { _ = queued.wait(timeout: .now() + 10) }
        defer { queued.signal() }
        for index in first..<(first + count) {
            var message = ByteBuffer(repeating: UInt8(truncatingIfNeeded: index), count: size)
            message.setInteger(UInt32(index), at: 0)
            try bob.engine.sendUnreliable(message, to: [alice.peer.identifier])
        }
    }

    static func indices(_ messages: [ByteBuffer]) -> [UInt32] {
        messages.map { $0.getInteger(at: $0.readerIndex, as: UInt32.self) ?? .max }
    }

    /// A burst to one peer leaves as segmented writes and arrives joined where the kernel offers
    /// both (loopback does), and each datagram is still delivered once, in order; with offload off
    /// the same burst goes one datagram at a time.
    @Test(arguments: [true, false])
    func aBurstIsSegmentedOnTheWayAndDeliveredDatagramByDatagram(offload: Bool) async throws {
        let (alice, bob) = try await Self.connectedPair(segmentationOffload: offload)
        let count = 64
        try Self.burst(count, of: 1_200, from: bob, to: alice)
        #expect(try await eventually { alice.messages(from: bob).count == count })
        #expect(Self.indices(alice.messages(from: bob)) == (0..<count).map { UInt32($0) })
        let sent = try await bob.engine.datagramOffload.get()
        let arrived = try await alice.engine.datagramOffload.get()
        if offload {
            // 32 KiB batches of 1,236-byte datagrams: 26 + 26 + 12.
            #expect(sent.segmentedWrites == (System.supportsUDPSegmentationOffload ? 3 : 0))
            #expect(arrived.joinedReceived == (System.supportsUDPSegmentationOffload && System.supportsUDPReceiveOffload ? count : 0))
        } else {
            #expect(sent.segmentedWrites == 0 && arrived.joinedReceived == 0)
        }
        await alice.shutdown()
        await bob.shutdown()
    }

    /// The engine reports the end of each read that delivered messages, after them, so that a
    /// consumer held back during a read (`MCSession.events()`) is woken for the rest: the last
    /// message of a burst is followed by a read end, and a read that delivered nothing reports none.
    @Test func everyReadThatDeliveredReportsItsEndAfterItsMessages() async throws {
        let (alice, bob) = try await Self.connectedPair()
        let count = 64
        try Self.burst(count, of: 1_200, from: bob, to: alice)
        #expect(try await eventually { alice.messages(from: bob).count == count })
        #expect(try await eventually { alice.messagesAtReadEnds.last == count })
        let ends = alice.messagesAtReadEnds
        #expect(zip(ends, ends.dropFirst()).allSatisfy { $0 < $1 }, "a read end without a message since the last: \(ends)")
        // Reliable messages too (TLS records over the connection).
        for index in 0..<50 { try bob.engine.send(ByteBuffer(string: "reliable \(index)"), to: [alice.peer.identifier]) }
        #expect(try await eventually { alice.messagesAtReadEnds.last == count + 50 })
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A segmented write the kernel finds too large (EMSGSIZE, here a write past 64 KiB in all;
    /// on a real path a segment above the MTU) loses nothing: its datagrams go again one by one,
    /// and datagrams that long are not joined again. The socket stays open.
    @Test func aWriteTooLargeIsSentAgainDatagramByDatagram() async throws {
        try #require(System.supportsUDPSegmentationOffload)
        let (alice, bob) = try await Self.connectedPair()
        try await bob.engine.eventLoop.submit { bob.engine.state.value.bytesPerSegmentedWrite = 80 * 1024 }.get()
        // Nine sealed datagrams of 8,228 bytes: 74,052 bytes in one write, more than UDP carries.
        try Self.burst(9, of: 8_192, from: bob, to: alice)
        #expect(try await eventually { alice.messages(from: bob).count == 9 })
        var report = try await bob.engine.datagramOffload.get()
        #expect(report.segmentedWrites == 1 && report.largestSegment == 8_227 && report.refusals == 0 && report.segmenting, "\(report)")
        try Self.burst(9, of: 8_192, from: bob, to: alice, startingAt: 9)
        #expect(try await eventually { alice.messages(from: bob).count == 18 })
        #expect(Set(Self.indices(alice.messages(from: bob))) == Set(0..<18))
        report = try await bob.engine.datagramOffload.get()
        #expect(report.segmentedWrites == 1, "datagrams above the learned limit were joined again")
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A segmented write the kernel refuses (EINVAL, here more segments than it takes) closes the
    /// socket; the engine binds it again, and after the second refusal sends datagrams singly,
    /// which arrive.
    @Test func refusedSegmentationFallsBackToSingleDatagrams() async throws {
        try #require(System.supportsUDPSegmentationOffload)
        let (alice, bob) = try await Self.connectedPair()
        try await bob.engine.eventLoop.submit { bob.engine.state.value.segmentsPerWrite = 300 }.get()
        for refusal in 1...DatagramSegmentation.refusalsBeforeGivingUp {
            // Two writes of 300 datagrams of 76 bytes (22,800 bytes each, but more segments than any
            // kernel takes), both pending when the first fails: one closing, one refusal.
            try Self.burst(600, of: 40, from: bob, to: alice)
            #expect(try await eventually {
                guard let report = try? bob.engine.datagramOffload.wait() else { return false }
                return report.refusals == refusal && report.socketOpen
            })
            #expect(try await bob.engine.datagramOffload.get().segmenting == (refusal < DatagramSegmentation.refusalsBeforeGivingUp))
        }
        var report = try await bob.engine.datagramOffload.get()
        #expect(!report.segmenting)
        let writes = report.segmentedWrites
        let before = alice.messages(from: bob).count
        try Self.burst(300, of: 40, from: bob, to: alice, startingAt: 1_000)
        #expect(try await eventually { alice.messages(from: bob).count - before == 300 })
        #expect(Set(Self.indices(Array(alice.messages(from: bob).dropFirst(before)))) == Set((1_000..<1_300).map { UInt32($0) }))
        report = try await bob.engine.datagramOffload.get()
        #expect(report.segmentedWrites == writes)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// How many junk datagrams the storm sends: 20,000 in the test run, 100,000 in
    /// scripts/adversarial (`MULTIPEER_JUNK_DATAGRAMS`); whole hundreds of 200, at most 1,400,000
    /// (one checkpoint per 200 must stay inside the replay window).
    static let junkCount: Int = {
        let asked = ProcessInfo.processInfo.environment["MULTIPEER_JUNK_DATAGRAMS"].flatMap { Int($0) } ?? 20_000
        return min(max(asked / 200, 1), 7_000) * 200
    }()

    /// `junkCount` junk datagrams get no reply and deliver nothing, and the session goes on working.
    /// Much of the junk carries Alice's real receiver ID for the connection, so it gets past the
    /// lookup to the rules behind it: the epoch and counter limits, the replay window and, on a
    /// sealed connection, the AEAD. On a plain connection nothing authenticates a datagram
    /// (docs/PROTOCOL.md §8): a forgery with a fresh counter from the peer's IP address would be
    /// delivered by design, so the plain junk is what the rules must still drop there: counters at
    /// or past the epoch limit (UInt64.max once overflowed the replay window), the other kind,
    /// reserved bits, replays and counters below the window. (A later epoch would be accepted there
    /// as a fresh counter would; on a sealed connection it is AEAD junk like the rest.)
    @Test(arguments: [true, false])
    func junkGetsNoReplyAndDoesNotDisturbTheSession(encrypted: Bool) async throws {
        let preference: WireEncryptionPreference = encrypted ? .required : .none
        let alice = try EngineProbe(name: "alice", preference: preference, identity: encrypted ? try Self.pki.peer("alice") : nil)
        let bob = try EngineProbe(name: "bob", preference: preference, identity: encrypted ? try Self.pki.peer("bob") : nil)
        // Bob's datagrams go to the tap: the test decides which reach Alice, from its socket.
        let tap = try await DatagramTap.connect(bob, to: alice)
        let kind: DatagramHeader.Kind = encrypted ? .sealed : .plain
        let genuineCount = 8_400
        let genuine = try await tap.capture(genuineCount, from: bob, to: alice) { "g\($0)" }
        try #require(genuine.count == genuineCount)
        #expect(alice.messages(from: bob).isEmpty)
        let headers = try genuine.map { try DatagramHeader.decode(datagram: $0).header }
        // Alice's receiver ID for this connection, as every genuine datagram carries it.
        let receiverID = headers[0].receiverID
        #expect(headers.allSatisfy { $0.kind == kind && $0.receiverID == receiverID && $0.epoch == 0 })
        #expect(headers.map(\.counter) == Array(0..<UInt64(genuineCount)))

        let recorder = DatagramRecorder()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let attacker = try await DatagramBootstrap(group: group)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(recorder) } }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(try await alice.engine.datagramPort.get())
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        func genuineItems(_ indices: some Sequence<Int>) -> [(datagram: ByteBuffer, message: String)] {
            indices.map { (genuine[$0], "g\($0)") }
        }

        // The top of the window first: counters 8,300-8,399 seen, 0-207 now below the window.
        let seen = 8_300..<genuineCount
        try await deliver(genuineItems(seen), from: attacker, to: target, receiver: alice, sender: bob)
        let tooOld = 0...(genuineCount - 1 - alice.engine.configuration.datagramLimits.replayWindow)
        // Fresh counters inside the window, held back: one goes after every 200 junk datagrams (so
        // Alice's socket never queues more than that), and the last one after all the junk.
        let checkpoints = 1_000..<(1_000 + Self.junkCount / 200)
        try #require(checkpoints.upperBound <= seen.lowerBound && tooOld.upperBound < checkpoints.lowerBound)
        let seed = UInt64.random(in: 0 ... .max)
        var generator = SeededGenerator(seed: seed)
        var nextCheckpoint = checkpoints.lowerBound
        for index in 0..<Self.junkCount {
            let junk = Self.junk(
                index, kind: kind, receiverID: receiverID, genuine: genuine, seen: seen, tooOld: tooOld,
                notYetSent: nextCheckpoint..<checkpoints.upperBound, using: &generator)
            attacker.write(AddressedEnvelope(remoteAddress: target, data: junk), promise: nil)
            if index % 200 == 199 {
                do {
                    try await deliver(genuineItems([nextCheckpoint]), from: attacker, to: target, receiver: alice, sender: bob)
                } catch {
                    // A forgery that moved the window makes the genuine datagram a replay.
                    let (foreign, repeats) = Self.junkDelivered(alice.messages(from: bob), genuine: Set(genuineItems(0..<genuineCount).map(\.message)))
                    Issue.record("checkpoint g\(nextCheckpoint) after junk \(index): \(foreign) foreign messages, \(repeats) repeats delivered so far (seed \(seed))")
                    throw error
                }
                nextCheckpoint += 1
            }
        }
        #expect(nextCheckpoint == checkpoints.upperBound)
        // The last checkpoint came after all the junk: Alice has judged all of it, and delivered
        // exactly the genuine datagrams, each once.
        let genuineMessages = Set((Array(seen) + Array(checkpoints)).map { "g\($0)" })
        let (foreign, repeats) = Self.junkDelivered(alice.messages(from: bob), genuine: genuineMessages)
        #expect(foreign == 0 && repeats == 0, "junk was delivered: \(foreign) foreign messages, \(repeats) repeats (seed \(seed))")
        let missing = genuineMessages.subtracting(alice.messages(from: bob).map { String(buffer: $0) })
        #expect(missing.isEmpty, "genuine datagrams not delivered: \(missing.sorted().prefix(10))")
        let replies = try await recorder.arrivalsBeforeMarker(on: attacker, group: group)
        #expect(replies.isEmpty, "the session answered junk \(replies.count) times (seed \(seed))")

        // Genuine traffic still flows: a fresh datagram from Bob, and a reliable message.
        let afterTheStorm = try await tap.capture(1, from: bob, to: alice) { _ in "after the storm" }
        try await deliver([(afterTheStorm[0], "after the storm")], from: attacker, to: target, receiver: alice, sender: bob)
        try bob.engine.send(ByteBuffer(string: "reliable too"), to: [alice.peer.identifier])
        #expect(try await eventually {
            Set(alice.messages(from: bob).map { String(buffer: $0) }).isSuperset(of: ["after the storm", "reliable too"])
        })
        #expect(alice.isConnected(to: bob) && bob.isConnected(to: alice))
        try await attacker.close().get()
        try await group.shutdownGracefully()
        await tap.close()
        await alice.shutdown()
        await bob.shutdown()
    }

    /// How many of `messages` are not genuine at all, and how many repeat one.
    static func junkDelivered(_ messages: [ByteBuffer], genuine: Set<String>) -> (foreign: Int, repeats: Int) {
        let texts = messages.map { String(buffer: $0) }
        return (texts.filter { !genuine.contains($0) }.count, texts.count - Set(texts).count)
    }

    /// One junk datagram of the storm; `index % 13` picks its sort. `seen` and `tooOld` index
    /// genuine datagrams that Alice has had or that lie below her window; `notYetSent` those she
    /// will get later, which a forgery that moved her window would make her refuse.
    static func junk(
        _ index: Int, kind: DatagramHeader.Kind, receiverID: UInt32, genuine: [ByteBuffer], seen: Range<Int>,
        tooOld: ClosedRange<Int>, notYetSent: Range<Int>, using generator: inout SeededGenerator
    ) -> ByteBuffer {
        let other: DatagramHeader.Kind = kind == .sealed ? .plain : .sealed
        let limit = WireLimits.datagramEpochCounterLimit
        // Counters no genuine datagram of this test uses, below the epoch limit.
        let unused = UInt64(genuine.count)..<limit
        var stranger = UInt32.random(in: 1 ... .max, using: &generator)
        while stranger == receiverID { stranger = UInt32.random(in: 1 ... .max, using: &generator) }
        let anyEpoch = [0, 1, UInt32.random(in: 0 ... .max, using: &generator)].randomElement(using: &generator)!
        let randomBody = (0..<Int.random(in: 16...200, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        func datagram(_ kind: DatagramHeader.Kind, receiverID: UInt32 = receiverID, epoch: UInt32, counter: UInt64, body: [UInt8]) -> ByteBuffer {
            var datagram = ByteBuffer()
            DatagramHeader(kind: kind, receiverID: receiverID, epoch: epoch, counter: counter).encode(into: &datagram)
            datagram.writeBytes(body)
            return datagram
        }
        switch index % 13 {
        // Junk that the receiver ID lookup, or the header checks before it, already stop.
        case 0:
            return ByteBuffer(bytes: randomBody.prefix(Int.random(in: 0...randomBody.count, using: &generator)))
        case 1:
            return ByteBuffer(bytes: [1, 0, 0])
        case 2:
            return datagram(.sealed, receiverID: stranger, epoch: 0, counter: UInt64(index), body: Array(repeating: 0xAA, count: 64))
        case 3:
            return datagram(.plain, receiverID: stranger, epoch: 1, counter: .max, body: Array(repeating: 0x55, count: 1_000))
        // From here on, Alice's real receiver ID for the connection.
        case 4:
            // The very top of the counter range, in the current, the next or any epoch.
            return datagram(kind, epoch: anyEpoch, counter: .max - UInt64.random(in: 0...3, using: &generator), body: randomBody)
        case 5:
            // Any counter at or past the epoch limit.
            return datagram(kind, epoch: anyEpoch, counter: UInt64.random(in: limit ... .max, using: &generator), body: randomBody)
        case 6:
            guard kind == .sealed else {
                // Plain: any later epoch is accepted by design (§8 rule 2, nothing authenticates
                // it); an earlier counter of the current one, with other contents, is not.
                return datagram(kind, epoch: 0, counter: UInt64(tooOld.randomElement(using: &generator)!), body: randomBody)
            }
            // Sealed: a later epoch, past the next: its key is derived and the AEAD refuses it.
            return datagram(kind, epoch: UInt32.random(in: 2 ... .max, using: &generator), counter: UInt64.random(in: unused, using: &generator), body: randomBody)
        case 7:
            // The other kind, with a fresh counter in the current or the next epoch.
            return datagram(other, epoch: UInt32.random(in: 0...1, using: &generator), counter: UInt64.random(in: unused, using: &generator), body: randomBody)
        case 8:
            // A non-zero reserved byte, everything else fresh and right.
            var junk = datagram(kind, epoch: 0, counter: UInt64.random(in: unused, using: &generator), body: randomBody)
            junk.setInteger(UInt8.random(in: 1...255, using: &generator), at: junk.readerIndex + Int.random(in: 1...3, using: &generator))
            return junk
        case 9:
            // A replay of a genuine datagram Alice has had.
            return genuine[seen.randomElement(using: &generator)!]
        case 10:
            // A genuine datagram below the window: it would authenticate, only the window stops it.
            return genuine[tooOld.randomElement(using: &generator)!]
        case 11:
            // A counter Alice has seen, with other contents: the window stops it before any AEAD.
            return datagram(kind, epoch: 0, counter: UInt64(seen.randomElement(using: &generator)!), body: randomBody)
        default:
            guard kind == .sealed else {
                // Plain: a counter below the window, other contents.
                return datagram(kind, epoch: 0, counter: UInt64(tooOld.randomElement(using: &generator)!), body: randomBody)
            }
            // Sealed: forgeries the window lets through to the AEAD, which must refuse them without
            // moving the window: at counters of genuine datagrams still to come, which must then
            // still arrive.
            let future = notYetSent.randomElement(using: &generator)!
            var forged = genuine[future]
            let bodyStart = forged.readerIndex + WireLimits.datagramHeaderLength
            switch Int.random(in: 0..<4, using: &generator) {
            case 0:
                // One bit of the ciphertext or tag flipped.
                let offset = bodyStart + Int.random(in: 0..<(forged.readableBytes - WireLimits.datagramHeaderLength), using: &generator)
                forged.setInteger(forged.getInteger(at: offset, as: UInt8.self)! ^ (1 << UInt8.random(in: 0...7, using: &generator)), at: offset)
            case 1:
                // The header (the associated data) moved to another fresh counter.
                forged.setInteger(UInt64(notYetSent.randomElement(using: &generator)!) + UInt64(genuine.count), at: forged.readerIndex + 12)
            case 2:
                // The header moved to the next epoch: her next key must not open it either.
                forged.setInteger(UInt32(1), at: forged.readerIndex + 8)
            default:
                // Random ciphertext under the genuine header.
                forged = datagram(kind, epoch: 0, counter: UInt64(future), body: randomBody)
            }
            return forged
        }
    }
}

@Suite("Datagram replay and reordering over real UDP", .serialized)
struct DatagramReplayOverUDPTests {
    @Test func reorderedDatagramsAreAcceptedAndReplaysDropped() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        let tap = try await DatagramTap.connect(bob, to: alice)
        // The 51st is held back as a sentinel for the end.
        let datagrams = try await tap.capture(51, from: bob, to: alice) { "n\($0)" }
        #expect(alice.messages(from: bob).isEmpty)

        let port = try #require(try await alice.engine.datagramPort.get())
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let relay = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        for datagram in datagrams[0..<50].reversed() {
            try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
        }
        #expect(try await eventually { alice.messages(from: bob).count == 50 })
        for _ in 0..<3 {
            for datagram in datagrams[0..<50] {
                try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
            }
        }
        // The sentinel follows the replays from the same socket: once Alice has it, she has judged
        // every replay before it.
        try await deliver([(datagrams[50], "n50")], from: relay, to: target, receiver: alice, sender: bob)
        let received = alice.messages(from: bob).map { String(buffer: $0) }
        #expect(received.filter { $0 == "n50" }.count == 1)
        let beforeSentinel = received.filter { $0 != "n50" }
        #expect(beforeSentinel.count == 50, "replays were delivered")
        #expect(Set(beforeSentinel) == Set((0..<50).map { "n\($0)" }))
        try await relay.close().get()
        try await group.shutdownGracefully()
        await tap.close()
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A datagram the application has no room for is dropped before it is opened, so it moves no
    /// state: the same datagram arriving again once there is room is delivered, once. (Opened and
    /// then dropped, it would have moved the replay window, and its second arrival counted as a
    /// replay.)
    @Test func aDatagramDroppedForLackOfRoomMovesNoState() async throws {
        // Room for two 3-byte messages undelivered, not three.
        let alice = try EngineProbe(name: "alice", maximumUndeliveredBytes: 8)
        let bob = try EngineProbe(name: "bob")
        let tap = try await DatagramTap.connect(bob, to: alice)
        let datagrams = try await tap.capture(21, from: bob, to: alice) { String(format: "m%02d", $0) }
        let port = try #require(try await alice.engine.datagramPort.get())
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let relay = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()

        alice.holdMessages(true)
        let readBefore = try await alice.engine.datagramOffload.get().read
        for datagram in datagrams[0..<20] {
            try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
        }
        // Every one was read (loopback does not lose 20 small datagrams; a lost one fails here).
        #expect(try await eventually { (try? alice.engine.datagramOffload.wait().read) ?? 0 >= readBefore + 20 })
        #expect(alice.messages(from: bob).count == 2)
        alice.holdMessages(false)

        // Room again: all twenty again, then a sentinel from the same socket.
        for datagram in datagrams[0..<20] {
            try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
        }
        try await deliver([(datagrams[20], "m20")], from: relay, to: target, receiver: alice, sender: bob)
        let received = alice.messages(from: bob).map { String(buffer: $0) }.filter { $0 != "m20" }
        #expect(received.count == 20, "delivered \(received.count) of 20")
        #expect(Set(received) == Set((0..<20).map { String(format: "m%02d", $0) }))
        try await relay.close().get()
        try await group.shutdownGracefully()
        await tap.close()
        await alice.shutdown()
        await bob.shutdown()
    }
}
