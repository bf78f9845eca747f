import MultipeerTestSupport
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
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(bob.address)], now: network.now)
        network.drain(alice)
        #expect(alice.dials.count == before + 1, "no dial to the news")
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .milliseconds(500)))
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
    }

    /// Bob moved away to an address nobody answers at either: the dial under way stays while
    /// news repeats what it tries, and news of other endpoints, however fast it alternates (a
    /// hostile member or mDNS responder), replaces it at most once per redial step.
    @Test func newsReplacesADialAtMostOncePerRedialStep() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 91)
        network.silentAddresses.insert(bob.address)
        bob.move()
        network.silentAddresses.insert(bob.address)
        alice.isListening = false
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(100))
        #expect(alice.suspended == [bob.peer.identifier])
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(0x0A00_0909)], now: network.now)
        network.drain(alice)
        let afterNews = alice.dials.count
        for _ in 0..<3 {
            alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(0x0A00_0909)], now: network.now)
            network.drain(alice)
        }
        #expect(alice.dials.count == afterNews, "the same news replaced the dial under way")
        for round in 0..<200 {
            let address: UInt32 = round % 2 == 0 ? 0x0A00_0A01 : 0x0A00_0A02
            alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(address)], now: network.now)
            network.drain(alice)
            network.run(for: .milliseconds(10))
        }
        // 2 s of news every 10 ms: one replacement per second at most, and the schedule's own
        // redials as each dial times out.
        let resumptionDials = alice.dials[afterNews...].filter { $0.purpose == .resumption }.count
        #expect(resumptionDials <= 4, "\(resumptionDials) dials in 2 s of news")
        #expect(alice.dials.allSatisfy { plan in plan.purpose != .resumption || plan.endpoints.contains { $0.address == .ipv4(bob.address - 0x100) } })
    }

    /// A member says bob is where another peer listens (a lie, or bob moved on): the dial that
    /// reaches it fails its handshake (the certificate is not bob's), and the next redials go to
    /// bob's own address first instead of back to the same place until the grace runs out.
    @Test func anEndpointWhoseHandshakeFailedIsNotTriedFirstAgain() throws {
        let network = VirtualNetwork(seed: 94)
        let nodes = try SessionCoreRecoveryTests.threeMembers(on: network)
        let (alice, bob, carol) = (nodes[0], nodes[1], nodes[2])
        alice.isListening = false
        let toAlice = try #require(carol.openConnectionsTo(alice).first)
        let lie = try MeshIntroduction(entries: [MeshIntroduction.Entry(peerID: bob.peer, endpoint: carol.endpoint)])
        network.send(frame: .meshIntroduction(lie), from: carol, on: toAlice.link)
        network.run(for: .milliseconds(100))
        network.resetConnection(between: alice, and: bob)
        #expect(network.run(until: { !alice.suspended.isEmpty }, limit: .seconds(1)))
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(5)))
        let plans = alice.dials.filter { $0.purpose == .resumption }
        #expect(plans.first?.endpoints.first == carol.endpoint, "the lie was not tried first: \(plans.map(\.endpoints))")
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
    }

    /// Bob's traffic is dropped for 1.5 s after the loss (alice's SYNs are lost) and alice does
    /// not listen. A dial that waits out its 2 s connect deadline would leave the schedule's
    /// next redials no room until 3 s; each redial step starts a fresh dial instead, and the one
    /// at 2 s gets through.
    @Test func aRedialStepReplacesADialWhoseSynsAreLost() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 95)
        alice.isListening = false
        bob.isReachable = false
        network.resetConnection(between: alice, and: bob)
        let lost = network.now
        network.run(for: .milliseconds(1_500))
        #expect(alice.suspended == [bob.peer.identifier])
        bob.isReachable = true
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .milliseconds(2_000)))
        #expect(network.now - lost < .milliseconds(2_300), "resumed \(network.now - lost) after the loss")
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
    }

    /// A real loop fires each timer a few milliseconds late, by a different amount each time:
    /// a dial stamped with when its timer fired can look a little younger than the step at the
    /// next tick. Every tick still starts a fresh dial (a SYN every second), none is skipped.
    @Test func timersFiringSlightlyLateStillRedialEveryStep() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 97)
        alice.isListening = false
        bob.isReachable = false
        final class Jitter {
            var generator = SeededGenerator(seed: 97)
            func next() -> TimeAmount { .microseconds(Int64.random(in: 0..<30_000, using: &generator)) }
        }
        let jitter = Jitter()
        alice.timerLateness = { _ in jitter.next() }
        network.resetConnection(between: alice, and: bob)
        let lost = network.now
        network.run(for: .milliseconds(5_500))
        let times = zip(alice.dials, alice.dialTimes).filter { $0.0.purpose == .resumption }.map { $0.1 - lost }
        let described = times.map { $0.nanoseconds / 1_000_000 }
        #expect(times.count == 6, "redials at \(described) ms")
        for (earlier, later) in zip(times, times.dropFirst()) {
            #expect(later - earlier <= .milliseconds(1_100), "redials at \(described) ms")
        }
    }

    /// Alice's loop is busy when her redial at 1 s is due, and it fires at 1.9 s. The dial it
    /// makes has been connecting for 0.1 s when the redial at 2 s comes, not the second it would
    /// have had on time: it carries on. (Stamped with the time it was due, it made way at once.)
    @Test func aRedialThatFiredLateIsNotReplacedEarly() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 96)
        alice.isListening = false
        bob.isReachable = false
        alice.timerLateness = { timer in
            if case .redialSuspended(_, _, attempt: 3) = timer { return .milliseconds(900) }
            return .zero
        }
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(3_500))
        let times = zip(alice.dials, alice.dialTimes).filter { $0.0.purpose == .resumption }.map(\.1)
        #expect(times.count >= 3)
        for (earlier, later) in zip(times, times.dropFirst()) {
            #expect(later - earlier >= .seconds(1), "redials \(times.map { $0.uptimeNanoseconds / 1_000_000 }) ms")
        }
        bob.isReachable = true
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(3)))
        SessionCoreRecoveryTests.expectNeverDisconnected(alice, bob)
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
