import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// Link recovery (docs/PROTOCOL.md §7.9) on the virtual network: a lost link is resumed by a new
/// connection, and reliable messages arrive once and in order; the app never hears of the gap.
@Suite("Session cores back to back: link recovery")
struct SessionCoreRecoveryTests {
    static let pki = try! TestPKI(name: "Recovery")
    static let policy = RecoveryPolicy(grace: .seconds(10))

    static func pair(
        seed: UInt64, aliceVersion: UInt8 = 2, bobVersion: UInt8 = 2, recovery: RecoveryPolicy = policy, identities: Bool = true
    ) throws -> (VirtualNetwork, VirtualNetwork.Node, VirtualNetwork.Node) {
        let network = VirtualNetwork(seed: seed)
        let alice = try network.addNode(
            "alice", preference: identities ? .required : .optional, identity: identities ? try pki.peer("alice") : nil,
            maxProtocolVersion: aliceVersion, recovery: recovery)
        let bob = try network.addNode(
            "bob", preference: identities ? .required : .optional, identity: identities ? try pki.peer("bob") : nil,
            maxProtocolVersion: bobVersion, recovery: recovery)
        try network.connect(alice, to: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }))
        return (network, alice, bob)
    }

    /// Alice, bob and carol in a full mesh with recovery.
    static func threeMembers(on network: VirtualNetwork) throws -> [VirtualNetwork.Node] {
        let nodes = try ["alice", "bob", "carol"].map {
            try network.addNode($0, identity: try Self.pki.peer($0), maxProtocolVersion: 2, recovery: Self.policy)
        }
        try network.connect(nodes[1], to: nodes[0])
        #expect(network.run(until: { nodes[0].isConnected(to: nodes[1]) }))
        try network.connect(nodes[2], to: nodes[0])
        #expect(network.run(until: { SessionCoreMeshTests.isFullMesh(nodes) }, limit: .seconds(10)))
        return nodes
    }

    static func texts(_ node: VirtualNetwork.Node, from other: VirtualNetwork.Node) -> [String] {
        node.messages.filter { $0.from == other.peer.identifier }.map { String(buffer: $0.message) }
    }

    static func expectNeverDisconnected(_ a: VirtualNetwork.Node, _ b: VirtualNetwork.Node, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(a.states(of: b) == [.connecting, .connected], "\(a.states(of: b))", sourceLocation: sourceLocation)
        #expect(b.states(of: a) == [.connecting, .connected], "\(b.states(of: a))", sourceLocation: sourceLocation)
    }

    @Test(arguments: [true, false])
    func aResetLinkIsResumedWithNothingLostOrRepeated(identities: Bool) throws {
        let (network, alice, bob) = try Self.pair(seed: 1, identities: identities)
        var sent: [String] = []
        for round in 0..<3 {
            for index in 0..<10 {
                let text = "a\(round)-\(index)"
                #expect(network.send(text, from: alice, to: bob))
                #expect(network.send("b\(round)-\(index)", from: bob, to: alice))
                sent.append(text)
            }
            // Some of these are in flight when the link goes.
            network.run(for: .milliseconds(1))
            network.resetConnection(between: alice, and: bob)
            #expect(alice.suspended.contains(bob.peer.identifier) && bob.suspended.contains(alice.peer.identifier))
            // Sent while no link carries the member: kept for the next one.
            #expect(network.send("a\(round)-gap", from: alice, to: bob))
            sent.append("a\(round)-gap")
            #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(5)))
        }
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == sent)
        #expect(Self.texts(alice, from: bob).count == 30)
        #expect(Self.texts(alice, from: bob) == (0..<3).flatMap { round in (0..<10).map { "b\(round)-\($0)" } })
        Self.expectNeverDisconnected(alice, bob)
        #expect(alice.resumptions.count == 3 && bob.resumptions.count == 3)
        #expect(alice.resumptions.map(\.resent).reduce(0, +) > 0, "nothing was in flight at any reset")
        // One connection each way is left, the rest closed.
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
    }

    /// Acknowledgements give the send budget back as the peer delivers, so a member that keeps
    /// what it sends holds only what is unacknowledged.
    @Test func acknowledgementsReleaseWhatWasKept() throws {
        let (network, alice, bob) = try Self.pair(seed: 2)
        var charge = 0
        for index in 0..<100 {
            let text = "message \(index)"
            charge += DeliveryLedger.charge(of: ByteBuffer(string: text))
            network.send(text, from: alice, to: bob)
        }
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice).count == 100)
        #expect(alice.acknowledgedCharge == charge)
    }

    @Test func thePeerNeverComingBackEndsTheMemberAfterTheGrace() throws {
        let (network, alice, bob) = try Self.pair(seed: 3)
        network.send("kept", from: alice, to: bob)
        network.resetConnection(between: alice, and: bob)
        bob.isReachable = false
        network.run(for: Self.policy.grace - .milliseconds(1))
        #expect(alice.states(of: bob) == [.connecting, .connected])
        #expect(alice.members.contains(bob.peer.identifier))
        network.run(for: .milliseconds(2))
        #expect(alice.states(of: bob).count == 3)
        guard case .notConnected(let error) = alice.lastState(of: bob) else {
            Issue.record("alice saw \(alice.states(of: bob))")
            return
        }
        #expect(error?.code == .connectionClosed)
        #expect(!alice.members.contains(bob.peer.identifier) && alice.suspended.isEmpty)
        // Nothing is left: no connection, no timer that does anything.
        network.run(for: .seconds(30))
        #expect(alice.openConnections == 0 && alice.states(of: bob).count == 3)
    }

    /// Only one side learned of the loss (the other's half of the connection looks open): its
    /// resumption supersedes the half-open connection, and what went into it is sent again.
    @Test func aHalfOpenLinkIsSupersededByTheResumption() throws {
        let (network, alice, bob) = try Self.pair(seed: 4)
        for connection in bob.openConnectionsTo(alice) { connection.vanish() }
        // Alice still writes into her half; bob never reads it.
        network.send("into the void", from: alice, to: bob)
        #expect(network.run(until: { alice.resumptions.count == 1 && bob.resumptions.count == 1 }, limit: .seconds(5)))
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == ["into the void"])
        Self.expectNeverDisconnected(alice, bob)
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
    }

    /// Both sides lose the link at once and both redial at once: the §7.5 rule keeps one.
    @Test(arguments: 0..<8)
    func bothSidesRedialingAtOnceEndUpWithOneConnection(seed: UInt64) throws {
        let (network, alice, bob) = try Self.pair(seed: 10 + seed)
        SessionCoreMeshTests.randomizeLatencies(network, seed: seed)
        for index in 0..<5 { network.send("x\(index)", from: alice, to: bob) }
        network.resetConnection(between: alice, and: bob)
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(9)))
        network.run(for: .seconds(2))
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
        #expect(Self.texts(bob, from: alice) == (0..<5).map { "x\($0)" })
        Self.expectNeverDisconnected(alice, bob)
    }

    /// One side can no longer be reached where it listened (its address changed): the other
    /// side's dials fail, its own get through, whichever identifier is larger.
    @Test(arguments: [true, false])
    func theSideThatMovedResumesByDialing(movedIsLarger: Bool) throws {
        let network = VirtualNetwork(seed: 20)
        let (large, small) = (Bytes16(high: 9, low: 0), Bytes16(high: 1, low: 0))
        let alice = try network.addNode(
            "alice", identity: try Self.pki.peer("alice"), identifier: movedIsLarger ? small : large, maxProtocolVersion: 2, recovery: Self.policy)
        let bob = try network.addNode(
            "bob", identity: try Self.pki.peer("bob"), identifier: movedIsLarger ? large : small, maxProtocolVersion: 2, recovery: Self.policy)
        try network.connect(alice, to: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }))
        network.resetConnection(between: alice, and: bob)
        bob.isListening = false  // bob moved: nothing answers at its old address
        for index in 0..<3 { network.send("m\(index)", from: alice, to: bob) }
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(9)))
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == ["m0", "m1", "m2"])
        #expect(alice.openConnections == 1 && bob.openConnections == 1)
        Self.expectNeverDisconnected(alice, bob)
        // A goodbye on the resumed connection ends the member for good, on the side that
        // dialed the resumption too (it was reported nowhere: SPEC-GAPS 25 of the interop peer).
        network.disconnect(alice)
        network.run(for: .seconds(1))
        #expect(bob.lastState(of: alice) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))))
        #expect(!bob.members.contains(alice.peer.identifier) && bob.suspended.isEmpty)
    }

    /// GOODBYE 7 on a connection that carries the member says another connection carries it
    /// now (the peer admitted a resumption of ours while this one was still up): the member is
    /// suspended and resumed, not ended.
    @Test func aConnectionSupersededByAResumptionDoesNotEndTheMember() throws {
        let (network, alice, bob) = try Self.pair(seed: 30)
        let link = try #require(alice.core.activeLink(to: bob.peer.identifier))
        network.send(frame: .goodbye(.duplicateConnection), from: alice, on: link)
        network.send("after", from: alice, to: bob)
        #expect(network.run(until: { bob.resumptions.count == 1 && alice.resumptions.count == 1 }, limit: .seconds(5)))
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == ["after"])
        Self.expectNeverDisconnected(alice, bob)
    }

    /// A version 1 peer has no recovery: the lost link ends the member at once, as before.
    @Test func aVersionOnePeerIsNotRecovered() throws {
        let (network, alice, bob) = try Self.pair(seed: 5, bobVersion: 1)
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(10))
        #expect(alice.suspended.isEmpty && bob.suspended.isEmpty)
        #expect(alice.lastState(of: bob) == .notConnected(ConnectionError(.connectionClosed)))
        #expect(bob.lastState(of: alice) == .notConnected(ConnectionError(.connectionClosed)))
    }

    @Test func recoveryTurnedOffEndsTheMemberAtOnce() throws {
        let (network, alice, bob) = try Self.pair(seed: 6, recovery: .off)
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(10))
        #expect(alice.lastState(of: bob) == .notConnected(ConnectionError(.connectionClosed)))
        #expect(alice.dials.allSatisfy { $0.purpose != .resumption })
    }

    /// A GOODBYE is an end, not a loss: nothing is resumed.
    @Test func aGoodbyeIsNotRecovered() throws {
        let (network, alice, bob) = try Self.pair(seed: 7)
        network.disconnect(alice)
        network.run(for: .seconds(1))
        #expect(bob.lastState(of: alice) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))))
        #expect(bob.suspended.isEmpty && bob.dials.allSatisfy { $0.purpose != .resumption })
    }

    /// Another peer that learned the resumption ID (it is never sent in the clear, but suppose)
    /// cannot take the member over: it has neither the certificate nor the key.
    @Test func anotherPeerCannotResumeTheSession() throws {
        let (network, alice, bob) = try Self.pair(seed: 8)
        let mallory = try network.addNode("mallory", identity: try Self.pki.peer("mallory"), identifier: alice.peer.identifier, maxProtocolVersion: 2, recovery: Self.policy)
        network.resetConnection(between: alice, and: bob)
        alice.isReachable = false
        network.run(for: .milliseconds(1))
        let id = try #require(bob.dials.last { $0.purpose == .resumption }?.token)
        // Mallory, claiming alice's peer ID, offers the ID with its own certificate and keys.
        let stolen = ConnectionConfiguration.ResumptionGrant(
            keys: ResumptionKeys(id: id.bytes, key: SecureBytes(randomCount: 32)), delivered: 0, peerCertificateFingerprint: nil)
        let plan = try #require(DialPlan(resuming: bob.peer, id: id, at: [bob.endpoint], grant: stolen))
        mallory.core.connect(plan)
        network.drain(mallory)
        network.run(for: .seconds(1))
        #expect(bob.suspended.contains(alice.peer.identifier))
        #expect(bob.resumptions.isEmpty)
        // Alice comes back and resumes; the app never saw mallory.
        alice.isReachable = true
        #expect(network.run(until: { bob.suspended.isEmpty }, limit: .seconds(9)))
        #expect(bob.resumptions.count == 1)
        Self.expectNeverDisconnected(alice, bob)
    }

    /// An acknowledgement of more than was sent is a violation.
    @Test func acknowledgingUnsentMessagesEndsTheConnection() throws {
        let (network, alice, bob) = try Self.pair(seed: 9)
        let link = try #require(bob.core.activeLink(to: alice.peer.identifier))
        network.send(frame: .acknowledge(delivered: 5), from: bob, on: link)
        network.run(for: .milliseconds(10))
        guard case .notConnected(let error) = alice.lastState(of: bob) else {
            Issue.record("alice saw \(alice.states(of: bob))")
            return
        }
        #expect(error?.code == .protocolViolation)
    }

    /// The link goes again between the listener's RESUME and its arrival: the listener has
    /// resumed, the dialer not yet. Both keep the session's keys, so the next try resumes it
    /// (it was lost when a resumption changed the keys).
    @Test func aLossBetweenTheTwoResumesIsResumedToo() throws {
        let (network, alice, bob) = try Self.pair(seed: 40)
        network.latency[.init(from: bob.index, to: alice.index)] = .milliseconds(30)
        alice.isListening = false  // alice dials, bob listens
        network.send("one", from: alice, to: bob)
        network.resetConnection(between: alice, and: bob)
        #expect(network.run(until: { bob.resumptions.count == 1 }, limit: .seconds(5)))
        #expect(alice.resumptions.isEmpty)
        network.resetConnection(between: alice, and: bob)
        network.send("two", from: alice, to: bob)
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty && !alice.resumptions.isEmpty }, limit: .seconds(9)))
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == ["one", "two"])
        Self.expectNeverDisconnected(alice, bob)
    }

    /// A HELLO that names the session but comes with another certificate changes nothing: the
    /// member's live connection stays, nothing is suspended or closed.
    @Test func aResumptionWithAnotherCertificateLeavesTheLiveLinkAlone() throws {
        let (network, alice, bob) = try Self.pair(seed: 41)
        let mallory = try network.addNode(
            "mallory", identity: try Self.pki.peer("mallory"), identifier: alice.peer.identifier, maxProtocolVersion: 2, recovery: Self.policy)
        let live = try #require(bob.core.activeLink(to: alice.peer.identifier))
        let id = try #require(bob.core.resumptionID(of: alice.peer.identifier))
        let grant = ConnectionConfiguration.ResumptionGrant(
            keys: ResumptionKeys(id: id.bytes, key: SecureBytes(randomCount: 32)), delivered: 0, peerCertificateFingerprint: nil)
        mallory.core.connect(try #require(DialPlan(resuming: bob.peer, id: id, at: [bob.endpoint], grant: grant)))
        network.drain(mallory)
        network.run(for: .seconds(1))
        #expect(bob.core.activeLink(to: alice.peer.identifier) == live)
        #expect(bob.suspended.isEmpty && bob.resumptions.isEmpty)
        network.send("still here", from: alice, to: bob)
        network.run(for: .milliseconds(100))
        #expect(Self.texts(bob, from: alice) == ["still here"])
    }

    /// The app calling off a connection attempt to a peer whose link is recovering: for the app
    /// that peer is connected, so nothing is called off.
    @Test func cancelConnectLeavesARecoveringMemberAlone() throws {
        let (network, alice, bob) = try Self.pair(seed: 42)
        network.resetConnection(between: alice, and: bob)
        alice.isReachable = false
        network.run(for: .milliseconds(300))
        network.cancelConnect(bob, peer: alice)
        network.run(for: .milliseconds(100))
        alice.isReachable = true
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(9)))
        Self.expectNeverDisconnected(alice, bob)
    }

    /// A peer that joined while a member was suspended is introduced to it once it is back.
    @Test func aMemberThatJoinedDuringTheGapMeetsTheResumedOne() throws {
        let (network, alice, bob) = try Self.pair(seed: 43)
        let carol = try network.addNode("carol", identity: try Self.pki.peer("carol"), maxProtocolVersion: 2, recovery: Self.policy)
        network.resetConnection(between: alice, and: bob)
        bob.isReachable = false
        try network.connect(carol, to: alice)
        #expect(network.run(until: { carol.isConnected(to: alice) }, limit: .seconds(5)))
        bob.isReachable = true
        #expect(network.run(until: { alice.suspended.isEmpty && carol.isConnected(to: bob) && bob.isConnected(to: carol) }, limit: .seconds(10)))
        Self.expectNeverDisconnected(alice, bob)
    }

    /// A peer reached at an IPv6 link-local address is redialed on the same interface: without
    /// it, such an address cannot be dialed at all.
    @Test func aRedialKeepsTheInterfaceOfALinkLocalPeer() throws {
        let network = VirtualNetwork(seed: 44)
        network.remoteScope = 7
        let alice = try network.addNode("alice", identity: try Self.pki.peer("alice"), maxProtocolVersion: 2, recovery: Self.policy)
        let bob = try network.addNode("bob", identity: try Self.pki.peer("bob"), maxProtocolVersion: 2, recovery: Self.policy)
        try network.connect(alice, to: bob)
        #expect(network.run(until: { alice.isConnected(to: bob) && bob.isConnected(to: alice) }))
        network.resetConnection(between: alice, and: bob)
        #expect(network.run(until: { alice.suspended.isEmpty && bob.suspended.isEmpty }, limit: .seconds(5)))
        let redials = (alice.dials + bob.dials).filter { $0.purpose == .resumption }
        #expect(!redials.isEmpty && redials.allSatisfy { $0.linkScope == 7 })
    }

    /// A member resumed by one peer is introduced by it to the others (for peers that joined
    /// during the gap); one that still has it suspended must not take the introduction for a new
    /// peer and dial it afresh, which ended the session it was resuming (found by scripts/soak).
    @Test(arguments: 0..<4)
    func anIntroductionDoesNotEndASuspendedMember(seed: UInt64) throws {
        let network = VirtualNetwork(seed: 50 + seed)
        let nodes = try Self.threeMembers(on: network)
        let (alice, bob, carol) = (nodes[0], nodes[1], nodes[2])
        // Alice loses both links. Carol's comes back first (alice dials her); alice and bob cannot
        // reach each other's listener yet, so their own redials fail, and carol's introductions
        // arrive between two of them.
        network.resetConnection(between: alice, and: bob)
        network.resetConnection(between: alice, and: carol)
        alice.isListening = false
        bob.isListening = false
        for (index, node) in nodes.enumerated() { network.send("m\(index)", from: node, to: nodes[(index + 1) % 3]) }
        #expect(network.run(until: { carol.resumptions.count == 1 }, limit: .seconds(5)))
        alice.isListening = true
        bob.isListening = true
        #expect(network.run(until: { nodes.allSatisfy { $0.suspended.isEmpty } }, limit: .seconds(9)))
        network.run(for: .seconds(3))
        for node in nodes {
            for other in nodes where other !== node {
                #expect(node.states(of: other) == [.connecting, .connected], "\(node.peer.displayName) saw \(other.peer.displayName): \(node.states(of: other))")
            }
        }
        #expect(Self.texts(bob, from: alice) == ["m0"] && Self.texts(carol, from: bob) == ["m1"] && Self.texts(alice, from: carol) == ["m2"])
    }

    /// Our address on the link went (the host moved): the link is lost at once, without a
    /// GOODBYE that would end the session, and resumed; nothing waits for the dead-peer deadline.
    @Test func aLinkFromAnAddressTheHostLostIsResumedAtOnce() throws {
        let (network, alice, bob) = try Self.pair(seed: 60)
        network.send("before", from: alice, to: bob)
        network.run(for: .milliseconds(100))
        // Bob's half stays open: bob hears of nothing until alice's resumption arrives.
        for connection in alice.openConnectionsTo(bob) { connection.remote?.vanish() }
        alice.core.localAddressesChanged(to: [alice.host], now: network.now)
        network.drain(alice)
        #expect(alice.suspended.isEmpty, "alice's own address is still there")
        alice.core.localAddressesChanged(to: ["10.0.9.9"], now: network.now)
        network.drain(alice)
        #expect(alice.suspended == [bob.peer.identifier])
        network.send("during", from: alice, to: bob)
        #expect(network.run(until: { alice.suspended.isEmpty && bob.resumptions.count == 1 }, limit: .seconds(1)))
        network.run(for: .seconds(1))
        #expect(Self.texts(bob, from: alice) == ["before", "during"])
        #expect(bob.refusals.isEmpty)
        Self.expectNeverDisconnected(alice, bob)
    }

    /// Without recovery the member ends at once, as at any lost link, rather than at the deadline.
    @Test func withoutRecoveryALinkFromAnAddressTheHostLostEndsAtOnce() throws {
        let (network, alice, bob) = try Self.pair(seed: 61, bobVersion: 1)
        alice.core.localAddressesChanged(to: [alice.host], now: network.now)
        alice.core.localAddressesChanged(to: ["10.0.9.9"], now: network.now)
        network.drain(alice)
        #expect(alice.lastState(of: bob) == .notConnected(ConnectionError(.connectionClosed)))
    }

    /// An address the host never listed (a listener bound to 127.0.0.2, which no interface
    /// shows) is not taken for one that went: only an address that disappears counts.
    @Test func aLinkFromAnAddressTheHostNeverListedStays() throws {
        let (network, alice, bob) = try Self.pair(seed: 62)
        for _ in 0..<3 {
            alice.core.localAddressesChanged(to: ["127.0.0.1", "10.0.9.9"], now: network.now)
            network.drain(alice)
        }
        network.run(for: .seconds(1))
        #expect(alice.suspended.isEmpty && alice.resumptions.isEmpty)
        #expect(alice.isConnected(to: bob) && alice.openConnections == 1)
    }

    /// Two members move at once: neither finds the other at its old address, but a third member
    /// that both reach again says where each is now (its introductions after each resumption),
    /// and they resume there. Without that, their grace ran out (found by scripts/soak).
    @Test(arguments: 0..<4)
    func twoMembersThatBothMovedFindEachOtherThroughAThird(seed: UInt64) throws {
        let network = VirtualNetwork(seed: 70 + seed)
        let nodes = try Self.threeMembers(on: network)
        let (alice, bob) = (nodes[0], nodes[1])
        SessionCoreMeshTests.randomizeLatencies(network, seed: seed)
        for node in [alice, bob] {
            node.move()
            for other in nodes where other !== node { network.resetConnection(between: node, and: other) }
        }
        network.send("to bob", from: alice, to: bob)
        network.send("to alice", from: bob, to: alice)
        #expect(network.run(until: { nodes.allSatisfy { $0.suspended.isEmpty } }, limit: .seconds(9)))
        network.run(for: .seconds(2))
        for node in nodes {
            for other in nodes where other !== node {
                #expect(node.states(of: other) == [.connecting, .connected], "\(node.peer.displayName) saw \(other.peer.displayName): \(node.states(of: other))")
            }
        }
        #expect(Self.texts(bob, from: alice) == ["to bob"] && Self.texts(alice, from: bob) == ["to alice"])
    }
}

/// Two peers alone in their session both move: neither old address leads anywhere and no third
/// member can introduce them, so only discovery can say where each is now (§7.9).
@Suite("Session cores back to back: discovery feeds redials")
struct SessionCoreDiscoveryRedialTests {
    @Test(arguments: [true, false])
    func twoPeersThatBothMovedResumeWhereDiscoverySeesThem(discovered: Bool) throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 80)
        for node in [alice, bob] { node.move() }
        network.resetConnection(between: alice, and: bob)
        network.send("to bob", from: alice, to: bob)
        network.run(for: .seconds(1))
        #expect(!alice.suspended.isEmpty && !bob.suspended.isEmpty, "both lost the link and recover")
        if discovered {
            // What each side's browser hears: the other's host at its new address (and junk).
            alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(bob.address), .ipv6(Bytes16(high: 0xFE80 << 48, low: 1))], now: network.now)
            network.drain(alice)
            bob.core.peerDiscovered(alice.peer.identifier, at: [.ipv4(alice.address)], now: network.now)
            network.drain(bob)
        }
        network.run(for: .seconds(12))
        if discovered {
            #expect(alice.states(of: bob) == [.connecting, .connected] && bob.states(of: alice) == [.connecting, .connected])
            #expect(SessionCoreRecoveryTests.texts(bob, from: alice) == ["to bob"])
        } else {
            // Each redialed the other's old address only, until the grace ran out.
            #expect(Self.left(alice.lastState(of: bob)) && Self.left(bob.lastState(of: alice)))
        }
    }

    /// Anyone on the link can answer mDNS for a member, so its news cannot hold up the old
    /// address: discovered addresses come after it, and each redial starts at the next of them
    /// (one that stalls holds up no other).
    @Test func discoveredAddressesComeAfterTheOldOneAndTakeTurns() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 82)
        bob.isReachable = false
        network.resetConnection(between: alice, and: bob)
        network.run(for: .milliseconds(100))
        #expect(!alice.suspended.isEmpty)
        let before = alice.dials.count
        let discovered: [WireEndpoint.Address] = [.ipv4(0x0A00_0901), .ipv4(0x0A00_0902), .ipv4(0x0A00_0903)]
        alice.core.peerDiscovered(bob.peer.identifier, at: discovered, now: network.now)
        network.drain(alice)
        network.run(for: .seconds(8))
        let plans = alice.dials[before...].filter { $0.purpose == .resumption }
        // Each redial waits out its 2 s connect deadline (bob is unreachable) before the next.
        #expect(plans.count >= 2, "\(plans.count) redials")
        var starts: Set<WireEndpoint.Address> = []
        for plan in plans {
            #expect(plan.endpoints.first?.address == .ipv4(bob.address), "the old address first: \(plan.endpoints)")
            let rest = plan.endpoints.dropFirst().map(\.address)
            #expect(rest.count == 3 && Set(rest) == Set(discovered))
            if let first = rest.first { starts.insert(first) }
        }
        #expect(starts.count == min(plans.count, 3), "each redial starts at the next discovered address")
    }

    /// Without an identity a redial pins no certificate: a host answering mDNS for the member
    /// would learn the session's resumption ID. Its news is not used.
    @Test func discoveryFeedsNoRedialsOfAMemberWithoutAnIdentity() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 83, identities: false)
        for node in [alice, bob] { node.move() }
        network.resetConnection(between: alice, and: bob)
        network.run(for: .seconds(1))
        #expect(!alice.suspended.isEmpty)
        let before = alice.dials.count
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(bob.address)], now: network.now)
        network.drain(alice)
        network.run(for: .seconds(3))
        #expect(alice.dials[before...].allSatisfy { plan in !plan.endpoints.contains { $0.address == .ipv4(bob.address) } })
    }

    static func left(_ state: PeerConnectionState?) -> Bool {
        if case .notConnected = state { return true }
        return false
    }

    /// News of a peer that is connected, or of one we never met, dials nothing.
    @Test func discoveryOfAConnectedPeerDialsNothing() throws {
        let (network, alice, bob) = try SessionCoreRecoveryTests.pair(seed: 81)
        let dials = alice.dials.count
        alice.core.peerDiscovered(bob.peer.identifier, at: [.ipv4(0x0A00_0999)], now: network.now)
        alice.core.peerDiscovered(Bytes16(high: 1, low: 2), at: [.ipv4(0x0A00_0999)], now: network.now)
        network.drain(alice)
        network.run(for: .seconds(1))
        #expect(alice.dials.count == dials && alice.isConnected(to: bob))
    }
}
