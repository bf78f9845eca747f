import Foundation
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Testing
import MultipeerProtocol

/// Link recovery between two engines over loopback (docs/PROTOCOL.md §7.9). The links are reset
/// from outside with `ss -K`, as a NAT or a router would drop them: each side's socket fails
/// (aborted here, reset there) with no goodbye. The rules themselves are tested on the virtual
/// network (`SessionCoreRecoveryTests`).
@Suite("Link recovery over loopback", .serialized, .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/ss")))
struct LinkRecoveryTests {
    static let pki = try! TestPKI()

    static func pair(maximumQueuedBytes: Int = 32 << 20, bobLoop: (any EventLoop)? = nil) async throws -> (EngineProbe, EngineProbe) {
        let alice = try EngineProbe(name: "alice", identity: try pki.peer("alice"), maximumQueuedBytes: maximumQueuedBytes)
        let bob = try EngineProbe(
            name: "bob", identity: try pki.peer("bob"), eventLoop: bobLoop ?? MultiThreadedEventLoopGroup.singleton.next())
        try #require(try await alice.connect(bob))
        return (alice, bob)
    }

    /// Resets every TCP connection to or from either probe's listening port.
    static func resetLinks(_ probes: EngineProbe...) async throws {
        try resetLinks(ports: try await listeningPorts(probes))
    }

    static func listeningPorts(_ probes: [EngineProbe]) async throws -> [Int] {
        var ports: [Int] = []
        for probe in probes {
            let data = try await probe.engine.connectionData(forPeer: Bytes16.random()).get()
            ports += data.endpoints.map { Int($0.port) }
        }
        return ports
    }

    /// Resets every TCP connection to or from these ports (asks no engine: one may be frozen).
    static func resetLinks(ports: [Int]) throws {
        let filter = ports.map { "sport = :\($0) or dport = :\($0)" }.joined(separator: " or ")
        let result = try BuiltProducts.runBlocking(URL(fileURLWithPath: "/usr/bin/ss"), ["-K", "-t", "state", "established", "( \(filter) )"], seconds: 10)
        try #require(result.status == 0, "ss -K failed: \(result.output)")
        try #require(result.output.contains("127.0.0.1"), "no connection was reset: \(result.output)")
    }

    /// The link was lost and is back: interrupted and restored in turn, once or more (a loaded
    /// machine may add a gap when both sides' redials yield to each other, below).
    static func restored(_ events: [Bool]) -> Bool {
        !events.isEmpty && events.count % 2 == 0 && events.enumerated().allSatisfy { $0.element == ($0.offset % 2 == 1) }
    }

    /// The link is lost now.
    static func interrupted(_ events: [Bool]) -> Bool { events.last == false }

    static func indices(_ messages: [ByteBuffer]) -> [UInt32] { messages.map { $0.getInteger(at: $0.readerIndex) ?? .max } }

    static func message(_ index: UInt32) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(index)
        return buffer
    }

    @Test func reliableMessagesSurviveResetsOnceAndInOrder() async throws {
        let (alice, bob) = try await Self.pair()
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        var sent: UInt32 = 0
        for _ in 0..<5 {
            for _ in 0..<40 {
                try alice.engine.send(Self.message(sent), to: [bob.peer.identifier])
                try bob.engine.send(Self.message(sent), to: [alice.peer.identifier])
                sent += 1
            }
            try await Self.resetLinks(alice, bob)
            // Sent while the link is down or being resumed: kept, then sent on the next one.
            for _ in 0..<10 {
                try alice.engine.send(Self.message(sent), to: [bob.peer.identifier])
                try bob.engine.send(Self.message(sent), to: [alice.peer.identifier])
                sent += 1
            }
            try #require(try await eventually { bob.messages(from: alice).count == Int(sent) && alice.messages(from: bob).count == Int(sent) })
        }
        #expect(Self.indices(bob.messages(from: alice)) == Array(0..<sent))
        #expect(Self.indices(alice.messages(from: bob)) == Array(0..<sent))
        #expect(alice.states(of: bob) == [.connecting, .connected])
        #expect(bob.states(of: alice) == [.connecting, .connected])
        // The async API heard of each gap: interrupted, then restored, at least five times. A
        // loaded machine may add a gap: when both sides redial at once, each may yield its dial
        // to the other's (§7.5's exception for a dial whose TCP connection is not yet up), and
        // the next redials resume the member.
        func heardEachGap(_ events: [Bool]) -> Bool { events.count >= 10 && Self.restored(events) }
        let heard = try await eventually { heardEachGap(alice.linkEvents(of: bob)) && heardEachGap(bob.linkEvents(of: alice)) }
        #expect(heard, "alice heard \(alice.linkEvents(of: bob)), bob heard \(bob.linkEvents(of: alice))")
        // Every kept message was acknowledged: the send queues are empty again.
        #expect(try await eventually { alice.engine.queuedBytes(to: bob.peer.identifier) == 0 && bob.engine.queuedBytes(to: alice.peer.identifier) == 0 })
    }

    /// Kept messages count against the send queue's limit until acknowledged, empty ones too:
    /// a peer that acknowledges nothing cannot make the sender keep messages without bound.
    /// Bob's own thread, which a test can stop.
    static let bobsThread = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    @Test func messagesKeptForAPeerThatDoesNotAcknowledgeFillTheSendQueue() async throws {
        let limit = 64 << 10
        let (alice, bob) = try await Self.pair(maximumQueuedBytes: limit, bobLoop: Self.bobsThread.next())
        defer { Task { await alice.shutdown(); await bob.shutdown() } }
        // Bob's thread stops (an app that froze the process, a peer that is not there): nothing
        // is read from alice, nothing acknowledged.
        let thaw = DispatchSemaphore(value: 0)
        Self.bobsThread.next().execute { thaw.wait() }
        var thawed = false
        defer { if !thawed { thaw.signal() } }
        var accepted = 0
        var refused = false
        while accepted < 100_000 {
            do {
                try alice.engine.send(ByteBuffer(), to: [bob.peer.identifier])
                accepted += 1
            } catch {
                refused = true
                break
            }
        }
        #expect(refused, "\(accepted) empty messages were taken")
        #expect(accepted <= limit / DeliveryLedger.entryCharge)
        thaw.signal()
        thawed = true
        // Bob comes back, takes and acknowledges them all: the queue empties.
        #expect(try await eventually { bob.messages(from: alice).count == accepted })
        #expect(try await eventually { alice.engine.queuedBytes(to: bob.peer.identifier) == 0 })
    }
}
