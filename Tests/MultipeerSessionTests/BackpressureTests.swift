import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Write backpressure (bounded send queues) and the receive budget (§7.6), between two engines.
@Suite("Backpressure and receive budgets", .serialized)
struct BackpressureTests {
    static func message(_ index: Int, size: Int) -> ByteBuffer {
        var buffer = ByteBuffer(repeating: UInt8(truncatingIfNeeded: index), count: size)
        buffer.setInteger(UInt32(index), at: 0)
        return buffer
    }

    /// A sender far faster than a receiver whose application stopped taking messages: the
    /// receiver stops reading at its budget, the sender's queue fills to its bound and sync sends
    /// are refused with queueFull (nothing silently lost); once the application takes its
    /// messages, everything accepted arrives, in order and intact.
    @Test func aFastSenderAndAStalledReceiverStayBounded() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        #expect(try await alice.connect(bob))
        alice.holdMessages(true)
        let size = 1 << 20
        var accepted = 0
        var refused: SessionSendError?
        while refused == nil && accepted < 1_000 {
            do {
                try bob.engine.send(Self.message(accepted, size: size), to: [alice.peer.identifier])
                accepted += 1
            } catch {
                refused = error
            }
            if accepted % 8 == 0 { await Task.yield() }
        }
        // The sender's queue is full and stays so: the receiver does not read.
        #expect(refused == .queueFull([alice.peer.identifier]))
        #expect(bob.engine.queuedBytes(to: alice.peer.identifier) <= bob.engine.configuration.maximumQueuedBytesPerPeer)
        // The receiver holds at most its budget plus the message that crossed it.
        let budget = alice.engine.configuration.maximumUndeliveredBytesPerPeer
        #expect(try await eventually { alice.heldBytes >= budget })
        #expect(alice.heldBytes <= budget + size)
        // Everything accepted: budgets, socket buffers and the sender's bounded queue.
        #expect(accepted * size < budget + bob.engine.configuration.maximumQueuedBytesPerPeer + 64 << 20)

        alice.holdMessages(false)
        #expect(try await eventually(seconds: 30) { alice.messages(from: bob).count == accepted })
        for (index, received) in alice.messages(from: bob).enumerated() {
            #expect(received == Self.message(index, size: size), "message \(index)")
        }
        #expect(try await eventually { bob.engine.queuedBytes(to: alice.peer.identifier) == 0 })
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Whether the engine queued the message; false when the peer's queue is full. Any other
    /// refusal (the peer left) is thrown, so a waiting loop cannot spin.
    static func trySend(_ probe: EngineProbe, _ message: ByteBuffer, to peer: Bytes16) throws -> Bool {
        do {
            try probe.engine.send(message, to: [peer])
            return true
        } catch {
            guard error.code == .queueFull else { throw error }
            return false
        }
    }

    /// The async path: a sender that waits for room keeps pace with a slow reader.
    @Test func waitingForRoomKeepsPaceWithASlowReader() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        #expect(try await alice.connect(bob))
        let size = 256 << 10
        let count = 400  // 100 MiB
        let target = alice.peer.identifier
        let limit = bob.engine.configuration.maximumQueuedBytesPerPeer
        // The reader, on a task of its own, takes messages in bursts: it lets 4 MiB pile up
        // untaken, then takes them all (the sender's own task must not drive it, or a full
        // queue would wait for a reader that waits for the sender).
        let reader = Task {
            while alice.messages(from: bob).count < count && !Task.isCancelled {
                alice.holdMessages(true)
                _ = try await eventually(seconds: 5) { alice.heldBytes >= 4 << 20 || alice.messages(from: bob).count >= count }
                alice.holdMessages(false)
                await Task.yield()
            }
        }
        var mostQueued = 0
        for index in 0..<count {
            while try !Self.trySend(bob, Self.message(index, size: size), to: target) {
                await bob.engine.waitForSendRoom(size, to: [target])
            }
            mostQueued = max(mostQueued, bob.engine.queuedBytes(to: target))
        }
        #expect(try await eventually(seconds: 30) { alice.messages(from: bob).count == count })
        reader.cancel()
        _ = try? await reader.value
        alice.holdMessages(false)
        #expect(mostQueued <= limit)
        #expect(try await eventually(seconds: 30) { alice.messages(from: bob).count == count })
        #expect(alice.messages(from: bob).enumerated().allSatisfy { $0.element.getInteger(at: 0, as: UInt32.self) == UInt32($0.offset) })
        await alice.shutdown()
        await bob.shutdown()
    }
}
