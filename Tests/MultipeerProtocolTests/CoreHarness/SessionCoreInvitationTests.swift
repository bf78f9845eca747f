import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// Invitations (docs/PROTOCOL.md §7.2) between session cores on a virtual clock: the inviter's
/// and the advertiser's cores, real connection machines between them, and the session
/// connection an acceptance leads to. The harness stands in for InvitationListener and
/// SessionEngine.invite; those are tested over sockets (InvitationListenerFloodTests,
/// the advertiser and browser suites).
@Suite("Session cores back to back: invitations")
struct SessionCoreInvitationTests {
    static let pki = try! TestPKI(name: "Invitations")

    static func pair(seed: UInt64 = 1, inviter: WireEncryptionPreference = .required, invitee: WireEncryptionPreference = .required)
        throws -> (VirtualNetwork, VirtualNetwork.Node, VirtualNetwork.Node)
    {
        let network = VirtualNetwork(seed: seed)
        let alice = try network.addNode("alice", preference: inviter, identity: inviter == .none ? nil : try pki.peer("alice"))
        let bob = try network.addNode("bob", preference: invitee, identity: invitee == .none ? nil : try pki.peer("bob"))
        return (network, alice, bob)
    }

    static func outcomes(_ node: VirtualNetwork.Node) -> [InvitationOutcome] { node.invitationOutcomes.map(\.outcome) }

    @Test(arguments: 1...6 as ClosedRange<UInt64>)
    func anAcceptedInvitationConnectsBothSessions(seed: UInt64) throws {
        let (network, alice, bob) = try Self.pair(seed: seed)
        network.defaultLatency = .milliseconds(Int64(seed * 7 % 40 + 1))
        network.advertise(bob)
        network.invite(bob, from: alice)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }, limit: .seconds(20)))
        #expect(Self.outcomes(alice) == [.accepted])
        #expect(alice.states(of: bob) == [.connecting, .connected])
        #expect(bob.states(of: alice) == [.connecting, .connected])
        network.run(for: .seconds(1))
        // The invitation connection is gone on both sides; the session holds one link.
        #expect(bob.invitations?.openConnections == 0 && bob.invitations?.core.count == 0)
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
        #expect(bob.invitations?.asked.map(\.peer.identifier) == [alice.peer.identifier])
    }

    @Test func aDeclinedInvitationDialsNothing() throws {
        let (network, alice, bob) = try Self.pair()
        network.advertise(bob) { _ in .decline() }
        network.invite(bob, from: alice)
        network.run(for: .seconds(5))
        #expect(Self.outcomes(alice) == [.declined])
        #expect(alice.dials.isEmpty && bob.dials.isEmpty)
        #expect(alice.reports.isEmpty && bob.reports.isEmpty)
        #expect(bob.invitations?.openConnections == 0)
    }

    /// The advertiser's answer 3 at the invitation's timeout reaches the inviter before its own
    /// deadline (the timeout plus a grace) would.
    @Test func anUnansweredInvitationTimesOutAtTheInvitersTimeout() throws {
        let (network, alice, bob) = try Self.pair()
        network.advertise(bob) { _ in .never }
        let start = network.now
        network.invite(bob, from: alice, timeout: .seconds(5))
        #expect(network.run(until: { !alice.invitationOutcomes.isEmpty }, limit: .seconds(30)))
        #expect(Self.outcomes(alice) == [.timedOut])
        let took = network.now - start
        #expect(took >= .seconds(5) && took < .seconds(5) + InvitationTiming.answerGrace, "took \(took)")
        network.run(for: .seconds(1))
        #expect(bob.invitations?.openConnections == 0 && bob.invitations?.core.count == 0)
    }

    /// An inviter may ask for an hour; the advertiser holds a place at most 120 s.
    @Test func theAdvertiserWaitsForItsAppNoLongerThanItsCap() throws {
        let (network, alice, bob) = try Self.pair()
        network.advertise(bob) { _ in .never }
        let start = network.now
        network.invite(bob, from: alice, timeout: .seconds(3600))
        #expect(network.run(until: { !alice.invitationOutcomes.isEmpty }, limit: .seconds(600)))
        #expect(Self.outcomes(alice) == [.timedOut])
        let took = network.now - start
        #expect(took >= InvitationTiming.maximumAnswerWait && took < InvitationTiming.maximumAnswerWait + .seconds(1), "took \(took)")
    }

    /// The app accepting after the invitation timed out sends nothing and makes no connection data.
    @Test func anAnswerAfterTheTimeoutIsDropped() throws {
        let (network, alice, bob) = try Self.pair()
        network.advertise(bob) { _ in .accept(after: .seconds(10)) }
        network.invite(bob, from: alice, timeout: .seconds(2))
        network.run(for: .seconds(30))
        #expect(Self.outcomes(alice) == [.timedOut])
        #expect(bob.invitations?.answers == [])
        #expect(alice.dials.isEmpty && alice.reports.isEmpty)
    }

    @Test func aFullSessionAnswersSessionFull() throws {
        let network = VirtualNetwork(seed: 9)
        let members = try (0..<WireLimits.maxSessionMembers).map { try network.addNode("member\($0)", identity: try Self.pki.peer("member\($0)")) }
        for joiner in members.dropFirst() { try network.connect(joiner, to: members[0]) }
        #expect(network.run(until: { SessionCoreMeshTests.isFullMesh(members) }, limit: .seconds(60)))
        let alice = try network.addNode("alice", identity: try Self.pki.peer("alice"))
        network.advertise(members[3])
        network.invite(members[3], from: alice)
        network.run(for: .seconds(5))
        #expect(Self.outcomes(alice) == [.sessionFull])
        #expect(alice.dials.isEmpty)
        #expect(members[3].invitations?.answers == [.sessionFull])
    }

    @Test func incompatibleEncryptionIsAnsweredBeforeAnyDial() throws {
        let (network, alice, bob) = try Self.pair(inviter: .none, invitee: .required)
        network.advertise(bob)
        network.invite(bob, from: alice)
        network.run(for: .seconds(5))
        #expect(Self.outcomes(alice) == [.encryptionIncompatible])
        #expect(alice.dials.isEmpty)
        #expect(bob.invitations?.answers == [.encryptionIncompatible])
    }

    /// Two peers inviting each other at once, both accepting: each session dials the other, and
    /// the tie-break leaves one link (§7.5).
    @Test(arguments: 1...8 as ClosedRange<UInt64>)
    func mutualInvitationsEndInOneLink(seed: UInt64) throws {
        let (network, alice, bob) = try Self.pair(seed: seed)
        SessionCoreMeshTests.randomizeLatencies(network, seed: seed)
        network.advertise(alice)
        network.advertise(bob)
        network.invite(bob, from: alice)
        network.invite(alice, from: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }, limit: .seconds(20)))
        network.run(for: .seconds(2))
        #expect(Self.outcomes(alice) == [.accepted] && Self.outcomes(bob) == [.accepted])
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
        #expect(alice.isConnected(to: bob) && bob.isConnected(to: alice))
        #expect(alice.states(of: bob).last == .connected && bob.states(of: alice).last == .connected)
    }

    /// An acceptance is followed only with connection data the invitee made, for the inviter.
    @Test(arguments: ["made for another peer", "made by another peer"])
    func anAcceptanceWithForeignConnectionDataIsNotFollowed(tampering: String) throws {
        let (network, alice, bob) = try Self.pair()
        let carol = try network.addNode("carol", identity: try Self.pki.peer("carol"))
        network.advertise(bob)
        let forCarol = try network.connectionData(from: bob, for: carol)
        let byCarol = try network.connectionData(from: carol, for: alice)
        bob.invitations?.tamper = { _ in
            try! InvitationAnswer(.accepted, connectionData: tampering == "made for another peer" ? forCarol : byCarol)
        }
        network.invite(bob, from: alice)
        network.run(for: .seconds(5))
        guard case .invalidAnswer = Self.outcomes(alice).first else {
            Issue.record("outcome \(Self.outcomes(alice))")
            return
        }
        #expect(alice.dials.isEmpty && alice.reports.isEmpty)
    }

    /// The inviter tries the invitee's addresses in order until one takes the connection.
    @Test func theInviterTriesEachAddressInTurn() throws {
        let (network, alice, bob) = try Self.pair()
        network.advertise(bob)
        let nowhere = try WireEndpoint(address: .ipv4(0x0A00_00FE), port: 7001)
        network.invite(bob, from: alice, addresses: [nowhere, nowhere, bob.invitationEndpoint])
        #expect(network.run(until: { alice.isConnected(to: bob) }, limit: .seconds(20)))
        #expect(Self.outcomes(alice) == [.accepted])

        let carol = try network.addNode("carol", identity: try Self.pki.peer("carol"))
        network.invite(bob, from: carol, addresses: [nowhere])
        network.invite(bob, from: carol, addresses: [])
        network.run(for: .seconds(5))
        #expect(carol.invitationOutcomes.count == 2)
        #expect(carol.invitationOutcomes.allSatisfy { if case .unreachable = $0.outcome { true } else { false } })
    }

    /// One host keeps 20 invitations open that the app never answers, each reopened as soon as
    /// one ends: the per-source limit sheds that host's own, so another host's invitation, less
    /// advanced than the flood's while it is being set up, is still asked about and accepted.
    @Test(arguments: 1...4 as ClosedRange<UInt64>)
    func aFloodOfUnansweredInvitationsFromOneHostDoesNotLockOutAnother(seed: UInt64) throws {
        let (network, alice, bob) = try Self.pair(seed: seed)
        SessionCoreMeshTests.randomizeLatencies(network, seed: seed)
        let mallory = try network.addNode("mallory", identity: try Self.pki.peer("mallory"))
        network.latency[.init(from: mallory.index, to: bob.index)] = .milliseconds(1)
        network.latency[.init(from: bob.index, to: mallory.index)] = .milliseconds(1)
        network.advertise(bob) { request in request.peer.identifier == mallory.peer.identifier ? .never : .accept() }
        var sent = 0
        func topUp() {
            while sent - mallory.invitationOutcomes.count < 20 && sent < 2_000 {
                network.invite(bob, from: mallory, timeout: .seconds(3600))
                sent += 1
            }
        }
        topUp()
        for _ in 0..<50 {
            network.run(for: .milliseconds(20))
            topUp()
        }
        let side = try #require(bob.invitations)
        #expect(side.openConnections <= Advertiser<Int>.maximumPending)
        network.invite(bob, from: alice)
        let deadline = network.now + .seconds(10)
        while !alice.isConnected(to: bob) && network.now < deadline {
            network.run(for: .milliseconds(2))
            topUp()
            #expect(side.openConnections <= Advertiser<Int>.maximumPending)
        }
        #expect(alice.isConnected(to: bob), "alice: \(Self.outcomes(alice)), mallory sent \(sent)")
        #expect(Self.outcomes(alice) == [.accepted])
        #expect(sent > 100, "the flood reopened only \(sent) invitations")
    }
}
