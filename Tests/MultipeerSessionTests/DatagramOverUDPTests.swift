import MultipeerCrypto
@testable import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// Counts whatever arrives on a UDP socket of the test's own.
final class ReplyCounter: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let count = Mutex(0)
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { count.withLock { $0 += 1 } }
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
        _ = try await eventually(seconds: 3) { alice.messages(from: bob).count >= 300 }
        let received = alice.messages(from: bob).map { String(buffer: $0) }
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
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try Self.pki.peer("bob"))
        #expect(try await alice.connect(bob))
        let count = 40
        for index in 0..<count {
            try bob.engine.sendUnreliable(ByteBuffer(repeating: UInt8(index), count: 8_192), to: [alice.peer.identifier])
        }
        #expect(try await eventually { alice.messages(from: bob).count == count })
        #expect(Set(alice.messages(from: bob).map { $0.getInteger(at: $0.readerIndex, as: UInt8.self) }) == Set((0..<count).map(UInt8.init)))
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func junkGetsNoReplyAndDoesNotDisturbTheSession() async throws {
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try Self.pki.peer("bob"))
        #expect(try await alice.connect(bob))
        let port = try #require(try await alice.engine.datagramPort.get())

        let counter = ReplyCounter()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let attacker = try await DatagramBootstrap(group: group)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(counter) } }
            .bind(host: "127.0.0.1", port: 0).get()
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        var generator = SystemRandomNumberGenerator()
        // 20,000 junk datagrams: random bytes, truncated headers, well-formed headers with random
        // receiver IDs, sealed bodies with bad tags, oversized lengths.
        for index in 0..<20_000 {
            var junk = ByteBuffer()
            switch index % 4 {
            case 0: junk.writeBytes((0..<Int.random(in: 0...200, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            case 1: junk.writeBytes([1, 0, 0])
            case 2:
                DatagramHeader(kind: .sealed, receiverID: UInt32.random(in: 1 ... .max, using: &generator), epoch: 0, counter: UInt64(index)).encode(into: &junk)
                junk.writeRepeatingByte(0xAA, count: 64)
            default:
                DatagramHeader(kind: .plain, receiverID: UInt32(index), epoch: 1, counter: .max).encode(into: &junk)
                junk.writeRepeatingByte(0x55, count: 1_000)
            }
            attacker.write(AddressedEnvelope(remoteAddress: target, data: junk), promise: nil)
            if index % 500 == 499 {
                attacker.flush()
                try await Task.sleep(for: .milliseconds(2))
            }
        }
        attacker.flush()
        try await Task.sleep(for: .milliseconds(300))
        #expect(counter.count.withLock { $0 } == 0, "the session answered junk")
        #expect(alice.messages(from: bob).isEmpty)
        // Genuine traffic still flows, both ways.
        try bob.engine.sendUnreliable(ByteBuffer(string: "after the storm"), to: [alice.peer.identifier])
        try bob.engine.send(ByteBuffer(string: "reliable too"), to: [alice.peer.identifier])
        #expect(try await eventually { alice.messages(from: bob).count == 2 })
        #expect(alice.isConnected(to: bob))
        try await attacker.close().get()
        try await group.shutdownGracefully()
        await alice.shutdown()
        await bob.shutdown()
    }
}

@Suite("Datagram replay and reordering over real UDP", .serialized)
struct DatagramReplayOverUDPTests {
    @Test func reorderedDatagramsAreAcceptedAndReplaysDropped() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        #expect(try await alice.connect(bob))
        let captured = Mutex<[ByteBuffer]>([])
        bob.engine.outgoingDatagramInterceptor.withLock { $0 = { datagram in captured.withLock { $0.append(datagram) }; return false } }
        for index in 0..<50 { try bob.engine.sendUnreliable(ByteBuffer(string: "n\(index)"), to: [alice.peer.identifier]) }
        #expect(try await eventually { captured.withLock { $0.count } == 50 })
        #expect(alice.messages(from: bob).isEmpty)

        let port = try #require(try await alice.engine.datagramPort.get())
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let relay = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        for datagram in captured.withLock({ $0 }).reversed() {
            try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
        }
        #expect(try await eventually { alice.messages(from: bob).count == 50 })
        for _ in 0..<3 {
            for datagram in captured.withLock({ $0 }) {
                try await relay.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram))
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        let received = alice.messages(from: bob).map { String(buffer: $0) }
        #expect(received.count == 50, "replays were delivered")
        #expect(Set(received) == Set((0..<50).map { "n\($0)" }))
        try await relay.close().get()
        try await group.shutdownGracefully()
        await alice.shutdown()
        await bob.shutdown()
    }
}
