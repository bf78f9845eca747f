import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol

/// What a suspended member's redials do with news of where it is now (docs/PROTOCOL.md §7.9):
/// news does not wait behind a dial still connecting to a dead address, news that comes before
/// the loss is noticed is kept for it, and our own move restarts a dial that left from the old
/// address. Each was a way the soak's moved peers ran out of grace.
@Suite("Session cores back to back: redials and news")
struct SessionCoreRedialNewsTests {
    /// Bob moved and his old address drops what is sent to it, so alice's first redial waits
    /// out its connect deadline; alice does not listen, so only her dials can resume. Discovery
    /// then says where bob is: the dial still connecting makes way for one that goes there.
    @Test func newsReplacesADialStillConnectingToADeadAddress() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 90)
        network.silentAddresses.insert(bob.address)
        bob.move()
        alice.isListening = false
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(100))
        #expect(alice.suspended == [bob.peer.identifier])
        let before = alice.dials.count
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(bob.address)])
        network.drain(alice)
        #expect(alice.dials.count == before + 1, "no dial to the news")
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .milliseconds(500)))
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
    }

    /// The same news again, or a scheduled redial, leaves the dial under way alone.
    @Test func aDialStillConnectingIsNotReplacedByTheSameNews() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 91)
        network.silentAddresses.insert(bob.address)
        network.silentAddresses.insert(0x0A00_0909)
        alice.isListening = false
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(100))
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(0x0A00_0909)])
        network.drain(alice)
        let dials = alice.dials.count
        for _ in 0..<3 {
            alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(0x0A00_0909)])
            network.drain(alice)
        }
        network.run(for: .milliseconds(1_500))
        #expect(alice.dials.count == dials, "the dial under way was replaced: \(alice.dials.count - dials) more")
    }

    /// Alice, bob and carol; bob moves, and alice has not noticed yet (her half of the link stays
    /// open) when carol, which bob reached again, introduces him at his new address. Alice does
    /// not listen, so bob cannot dial her: when she notices the loss, her redials must go where
    /// carol said, or the grace runs out at his old address.
    @Test func anIntroductionBeforeTheLossIsNoticedGuidesTheRedials() throws {
        let network = VirtualNetwork(seed: 92)
        let nodes = try SessionCoreRecoveryTests.threeMembers(on: network)
        let (alice, bob, carol) = (nodes[0], nodes[1], nodes[2])
        bob.move()
        alice.isListening = false
        network.resetConnection(between: bob, and: carol)
        for connection in bob.openConnectionsTo(alice) { connection.vanish() }
        #expect(network.run(until: { bob.suspended == [alice.peer.identifier] && carol.suspended.isEmpty }, limit: .seconds(2)))
        network.run(for: .milliseconds(100))
        #expect(alice.suspended.isEmpty, "alice noticed the loss too early for this test")
        for connection in alice.openConnectionsTo(bob) { connection.vanish() }
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(2)))
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
    }

    /// Our address changed while a redial was still connecting: it left from the old address,
    /// where no answer can come back. A new dial starts at once instead of after its deadline.
    @Test func ourMoveRestartsADialStillConnecting() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 93)
        alice.core.localAddressesChanged(to: [alice.host], now: network.now)
        network.drain(alice)
        bob.isReachable = false  // what alice sends from her old address goes nowhere
        alice.isListening = false
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(100))
        #expect(alice.suspended == [bob.peer.identifier])
        let before = alice.dials.count
        bob.isReachable = true
        alice.core.localAddressesChanged(to: ["10.0.9.9"], now: network.now)
        network.drain(alice)
        #expect(alice.dials.count == before + 1, "no new dial after our move")
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .milliseconds(500)))
    }
}
