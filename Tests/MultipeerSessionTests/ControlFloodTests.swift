import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Attack finding 3: a PING flood whose PONGs the attacker never reads grew the victim's memory
/// without bound (100 MB of PINGs, +1 GB). Now the victim stops reading from such a peer.
@Suite("Control-frame floods", .serialized)
struct ControlFloodTests {

    @Test func aPeerThatDoesNotReadItsPongsIsNoLongerRead() async throws {
        // A long dead-peer deadline, so the victim keeps the held connection for the whole test.
        let victim = try EngineProbe(
            name: "victim", preference: .none, keepalive: KeepalivePolicy(interval: .seconds(30), deadPeerDeadline: .seconds(120)))
        // No keepalive on the attacker: on a loaded machine its own dead-peer check must not end
        // the connection before the flood starts.
        let member = try await RawMember.join(victim, name: "flooder", preference: .none, keepalive: nil)
        let (attacker, channel) = (member.peer, member.channel)
        #expect(member.log.established?.isEncrypted == false)

        // From here the attacker writes raw plaintext PINGs and never reads.
        try await channel.setOption(.autoRead, value: false).get()
        try await channel.pipeline.removeHandler(name: "events").get()
        try await channel.pipeline.removeHandler(name: "connection").get()
        try await channel.pipeline.addHandler(DiscardingHandler()).get()
        var burst = ByteBuffer()
        for index in 0..<3_000 { try Frame.ping(UInt64(index)).encode(into: &burst) }

        let limit = 64 * 1_048_576
        var written = 0
        let writtenBox = ByteCounter()
        let burstSize = burst.readableBytes
        var stalledSince: ContinuousClock.Instant?
        let deadline = ContinuousClock.now + .seconds(60)
        while written < limit && channel.isActive && ContinuousClock.now < deadline {
            if channel.isWritable {
                stalledSince = nil
                let promise = channel.eventLoop.makePromise(of: Void.self)
                promise.futureResult.whenSuccess { writtenBox.add(burstSize) }
                channel.writeAndFlush(burst, promise: promise)
                written += burst.readableBytes
                await Task.yield()
            } else {
                let since = stalledSince ?? .now
                stalledSince = since
                // The attacker's sends are stuck; give the victim time to drain what it holds.
                if ContinuousClock.now - since > .seconds(2) { break }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        #expect(channel.isActive)
        // What the victim read = what left the attacker minus what still sits in the victim's
        // receive queue (the kernel's, which can grow to tens of MiB here). Each PING read costs
        // a PONG; without the limit the victim read all of it and kept every PONG.
        let sent = writtenBox.total
        let victimPort = try #require(channel.remoteAddress?.port)
        let attackerPort = try #require(channel.localAddress?.port)
        let queued = try #require(TCPQueues.read(local: victimPort, remote: attackerPort))
        let attackerQueued = try #require(TCPQueues.read(local: attackerPort, remote: victimPort))
        let readByVictim = sent - attackerQueued.transmit - queued.receive
        #expect(readByVictim < 8 * 1_048_576, "the victim read \(readByVictim) bytes of PING (sent \(sent))")
        #expect(victim.engine.connectedPeers.map(\.identifier) == [attacker.identifier])

        // Once the attacker reads its answers, the victim reads again.
        try await channel.setOption(.autoRead, value: true).get()
        channel.read()
        // The victim reads again: more of what the attacker had queued gets through.
        #expect(try await eventually(seconds: 20) {
            guard let victimQueues = TCPQueues.read(local: victimPort, remote: attackerPort),
                let attackerQueues = TCPQueues.read(local: attackerPort, remote: victimPort)
            else { return false }
            return writtenBox.total - attackerQueues.transmit - victimQueues.receive > readByVictim + 1_048_576
        })
        try await channel.close()
        await victim.shutdown()
    }
}

/// Bytes waiting in a loopback IPv4 TCP socket's kernel queues, from /proc/net/tcp.
enum TCPQueues {
    static func read(local: Int, remote: Int) -> (transmit: Int, receive: Int)? {
        // procfs files report size 0: read to the end rather than by size.
        guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp"), let bytes = try? handle.readToEnd() else { return nil }
        let table = String(decoding: bytes, as: UTF8.self)
        let localSuffix = String(format: ":%04X", local)
        let remoteSuffix = String(format: ":%04X", remote)
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 4, fields[1].hasSuffix(localSuffix), fields[2].hasSuffix(remoteSuffix) else { continue }
            let queues = fields[4].split(separator: ":")
            guard queues.count == 2, let transmit = Int(queues[0], radix: 16), let receive = Int(queues[1], radix: 16) else { return nil }
            return (transmit, receive)
        }
        return nil
    }
}

final class ByteCounter: Sendable {
    private let count = Mutex(0)
    func add(_ bytes: Int) { count.withLock { $0 += bytes } }
    var total: Int { count.withLock { $0 } }
}
