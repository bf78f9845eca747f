import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// Every way a session refuses or ends a connection, on the virtual network: what each side
/// reports, and that nothing is left behind.
@Suite("Session cores back to back: refusals")
struct SessionCoreRefusalTests {
    typealias Mesh = SessionCoreMeshTests

    static func pair(seed: UInt64 = 1, encrypted: Bool = true) throws -> (VirtualNetwork, VirtualNetwork.Node, VirtualNetwork.Node) {
        let (network, nodes) = try Mesh.network(seed: seed, size: 2, encrypted: encrypted)
        return (network, nodes[0], nodes[1])
    }

    @Test func connectionDataExpiresAfterItsLifetime() throws {
        let (network, dialer, maker) = try Self.pair()
        let data = try network.connectionData(from: maker, for: dialer)
        network.run(for: .seconds(Int64(WireLimits.connectionTokenLifetimeSeconds) + 1))
        network.connect(dialer, with: data)
        network.run(for: .seconds(5))
        #expect(dialer.states(of: maker) == [.connecting, .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken)))])
        #expect(maker.refusals.map(\.reason) == [.unknownToken])
        #expect(maker.states(of: dialer).isEmpty, "a refused dialer never reaches the maker's app")
        #expect(dialer.openConnections == 0 && maker.openConnections == 0)
    }

    @Test func connectionDataWorksOnce() throws {
        let (network, dialer, maker) = try Self.pair()
        let data = try network.connectionData(from: maker, for: dialer)
        network.connect(dialer, with: data)
        #expect(network.run(until: { dialer.isConnected(to: maker) && maker.isConnected(to: dialer) }))
        network.disconnect(dialer)
        #expect(network.run(until: { maker.lastState(of: dialer) == .notConnected(nil) || maker.states(of: dialer).count == 3 }))
        #expect(maker.lastState(of: dialer) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))))
        network.connect(dialer, with: data)
        network.run(for: .seconds(5))
        #expect(dialer.lastState(of: maker) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))))
        #expect(maker.refusals.map(\.reason) == [.unknownToken])
    }

    @Test func connectionDataMadeForAnotherPeerIsRefused() throws {
        let (network, nodes) = try Mesh.network(seed: 2, size: 3)
        let data = try network.connectionData(from: nodes[1], for: nodes[2])
        network.connect(nodes[0], with: data)
        network.run(for: .seconds(5))
        #expect(nodes[0].lastState(of: nodes[1]) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))))
        #expect(nodes[1].refusals.map(\.peer) == [nodes[0].peer])
    }

    /// A ninth peer is refused by a full session, and a full session does not dial a ninth.
    @Test func theNinthPeerIsRefused() throws {
        let (network, nodes) = try Mesh.network(seed: 3, size: 9)
        let (host, members, ninth) = (nodes[0], Array(nodes[1..<8]), nodes[8])
        for member in members { try network.connect(member, to: host) }
        #expect(network.run(until: { Mesh.isFullMesh(Array(nodes[0..<8])) }))
        try network.connect(ninth, to: host)
        network.run(for: .seconds(5))
        #expect(ninth.states(of: host) == [.connecting, .notConnected(ConnectionError(.peerSaidGoodbye(.sessionFull)))])
        #expect(host.refusals.map(\.reason) == [.sessionFull])
        // Dialing out from a full session is refused before any dial.
        let dialsBefore = host.dials.count
        try network.connect(host, to: ninth)
        network.run(for: .seconds(1))
        #expect(host.dials.count == dialsBefore)
        #expect(host.states(of: ninth) == [.connecting, .notConnected(ConnectionError(.notAdmitted(.sessionFull)))])
        Mesh.expectFullMesh(Array(nodes[0..<8]))
    }

    @Test(arguments: [true, false])
    func aRejectedPeerIsNeverConnected(rejectedByListener: Bool) throws {
        let (network, dialer, maker) = try Self.pair()
        (rejectedByListener ? maker : dialer).trustPolicy = { _ in false }
        try network.connect(dialer, to: maker)
        network.run(for: .seconds(5))
        let (rejecter, rejected) = rejectedByListener ? (maker, dialer) : (dialer, maker)
        #expect(rejecter.lastState(of: rejected) == .notConnected(ConnectionError(.trustRejectedLocally)))
        #expect(rejected.lastState(of: rejecter) == .notConnected(ConnectionError(.trustRejectedByPeer(.rejected))))
        #expect(!dialer.states(of: maker).contains(.connected) && !maker.states(of: dialer).contains(.connected))
        #expect(dialer.openConnections == 0 && maker.openConnections == 0)
    }

    @Test func anAppThatNeverAnswersTimesOut() throws {
        let (network, dialer, maker) = try Self.pair()
        maker.trustPolicy = nil
        try network.connect(dialer, to: maker)
        #expect(network.run(until: { maker.lastState(of: dialer) != .connecting && !maker.states(of: dialer).isEmpty }, limit: .seconds(60)))
        #expect(maker.lastState(of: dialer) == .notConnected(ConnectionError(.trustTimedOutLocally)))
        #expect(network.now - .uptimeNanoseconds(1_000_000_000) >= network.trustTimeout)
        network.run(for: .seconds(1))
        #expect(dialer.lastState(of: maker) == .notConnected(ConnectionError(.trustRejectedByPeer(.timedOut))))
    }

    /// Connection data whose endpoint leads to someone else: the dial ends before the app is
    /// asked, on the certificate pin (encrypted) or the HELLO's peer ID (plain).
    @Test(arguments: [true, false])
    func aDialThatReachesTheWrongPeerEndsBeforeTrust(encrypted: Bool) throws {
        let (network, nodes) = try Mesh.network(seed: 4, size: 3, encrypted: encrypted)
        let genuine = try network.connectionData(from: nodes[1], for: nodes[0])
        let misdirected = try ConnectionData(
            encryptionPreference: genuine.encryptionPreference, token: genuine.token, forPeer: genuine.forPeer,
            peerID: genuine.peerID, certificateFingerprint: genuine.certificateFingerprint, endpoints: [nodes[2].endpoint])
        network.connect(nodes[0], with: misdirected)
        network.run(for: .seconds(5))
        let expected = ConnectionError(encrypted ? .certificateMismatch : .unexpectedPeer)
        #expect(nodes[0].states(of: nodes[1]) == [.connecting, .notConnected(expected)])
        #expect(nodes[0].states(of: nodes[2]).isEmpty, "the stranger never reached the dialer's app")
        #expect(nodes[0].openConnections == 0)
    }

    /// A mesh-introduction HELLO is refused unless a connected member introduced the dialer:
    /// here the named introducer is no member, or a member that introduced no one.
    @Test(arguments: [false, true])
    func anIntroductionNobodyMadeIsRefused(introducerIsMember: Bool) throws {
        let (network, nodes) = try Mesh.network(seed: 5, size: 3)
        let stranger = nodes[2]
        if introducerIsMember {
            try network.connect(nodes[1], to: nodes[0])
            #expect(network.run(until: { Mesh.isFullMesh([nodes[0], nodes[1]]) }))
        }
        stranger.core.connect(DialPlan(introduced: nodes[0].peer, by: nodes[1].peer.identifier, at: nodes[0].endpoint))
        network.drain(stranger)
        network.run(for: .seconds(10))
        // An introduced dial is retried a bounded number of times (it may have overtaken its
        // introduction), each refused.
        let attempts = 1 + stranger.core.configuration.introducedDialRetries
        #expect(nodes[0].refusals.map(\.reason) == Array(repeating: .unknownToken, count: attempts))
        #expect(stranger.lastState(of: nodes[0]) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))))
    }

    /// A hostile member's introductions cost the session at most six dials per introduction
    /// lifetime, however many it sends.
    @Test func introductionsPastTheIntroducersQuotaAreIgnored() throws {
        let (network, nodes) = try Mesh.network(seed: 6, size: 2)
        let (victim, hostile) = (nodes[0], nodes[1])
        try network.connect(hostile, to: victim)
        #expect(network.run(until: { Mesh.isFullMesh(nodes) }))
        let link = try #require(hostile.core.activeLink(to: victim.peer.identifier))
        // Fake peers with the smallest identifiers, so the victim is the one to dial each; their
        // endpoint has nobody listening, so each dial fails at once and frees its place.
        var fake: UInt8 = 0
        for _ in 0..<5 {
            let entries = try (0..<WireLimits.maxMeshIntroductionEntries).map { _ in
                fake += 1
                return MeshIntroduction.Entry(
                    peerID: try WirePeerID(identifier: Bytes16(bytes: [0] + [UInt8](repeating: fake, count: 15))!, displayName: "fake\(fake)"),
                    endpoint: try WireEndpoint(address: .ipv4(0x0A00_00FE), port: 1))
            }
            network.send(frame: .meshIntroduction(try MeshIntroduction(entries: entries)), from: hostile, on: link)
            network.run(for: .seconds(1))
        }
        #expect(victim.dials.count == IntroductionLedger.maxPerIntroducer)
        #expect(victim.isConnected(to: hostile))
    }

    @Test func aDialToAnUnreachablePeerEndsWithinTheHandshakeDeadline() throws {
        let (network, dialer, maker) = try Self.pair()
        maker.isReachable = false
        try network.connect(dialer, to: maker)
        network.run(for: network.handshakeTimeout + .seconds(1))
        #expect(dialer.states(of: maker) == [.connecting, .notConnected(ConnectionError(.connectionClosed))])
        #expect(dialer.openConnections == 0)
    }

    @Test func aPeerThatStopsMidHandshakeTimesOut() throws {
        let (network, dialer, maker) = try Self.pair()
        try network.connect(dialer, to: maker)
        // The TCP connection completes after one latency; the peer falls silent just after.
        network.run(for: network.defaultLatency + .microseconds(1))
        maker.isReachable = false
        network.run(for: network.handshakeTimeout + .seconds(1))
        #expect(dialer.states(of: maker) == [.connecting, .notConnected(ConnectionError(.handshakeTimedOut))])
    }

    /// Cancelled while the peer's app is deciding: both sides end, each reports once, and
    /// neither keeps a link.
    @Test func cancellingADialDuringTheTrustStepEndsItOnBothSides() throws {
        let (network, dialer, maker) = try Self.pair()
        maker.trustPolicy = nil  // the maker's app never answers
        try network.connect(dialer, to: maker)
        #expect(network.run(until: { maker.states(of: dialer) == [.connecting] }))
        network.cancelConnect(dialer, peer: maker)
        network.run(for: .seconds(2))
        #expect(dialer.states(of: maker) == [.connecting, .notConnected(ConnectionError(.closedLocally))])
        #expect(maker.states(of: dialer) == [.connecting, .notConnected(ConnectionError(.peerSaidGoodbye(.normal)))])
        #expect(dialer.openConnections == 0 && maker.openConnections == 0)
        #expect(dialer.core.links.isEmpty && maker.core.links.isEmpty)
        network.run(for: .seconds(60))  // past every deadline: nothing more is reported
        #expect(dialer.states(of: maker).count == 2 && maker.states(of: dialer).count == 2)
    }

    /// A disconnect or cancel while an introduced dial waits for its retry is final: the retry
    /// never runs and the peer is reported not connected once.
    @Test(arguments: [false, true])
    func aPendingRedialIsCalledOffByDisconnectOrCancel(cancel: Bool) throws {
        let (network, nodes) = try Mesh.network(seed: 11, size: 3)
        let host = nodes[0]
        let (listener, dialer) = nodes[1].peer.identifier < nodes[2].peer.identifier ? (nodes[1], nodes[2]) : (nodes[2], nodes[1])
        try network.connect(listener, to: host)
        #expect(network.run(until: { Mesh.isFullMesh([host, listener]) }))
        network.latency[.init(from: host.index, to: listener.index)] = .seconds(5)
        try network.connect(dialer, to: host)
        // The refusal has reached the dialer (its link to the listener is gone): a retry is pending.
        #expect(network.run(until: { listener.refusals.count == 1 && dialer.openConnections == 1 }))
        #expect(dialer.lastState(of: listener) == .connecting)
        if cancel { network.cancelConnect(dialer, peer: listener) } else { network.disconnect(dialer) }
        network.run(for: .seconds(20))
        #expect(dialer.dials.filter { $0.peer == listener.peer }.count == 1)
        #expect(dialer.states(of: listener) == [.connecting, .notConnected(ConnectionError(.closedLocally))])
        #expect(listener.refusals.count == 1)
        if !cancel { #expect(dialer.core.links.isEmpty && dialer.openConnections == 0) }
    }

    /// A peer that disconnects is reported gone by every member; the others stay connected.
    @Test func aMemberThatLeavesIsReportedByAll() throws {
        let (network, nodes) = try Mesh.network(seed: 8, size: 4)
        for joiner in nodes.dropFirst() { try network.connect(joiner, to: nodes[0]) }
        #expect(network.run(until: { Mesh.isFullMesh(nodes) }))
        let leaver = nodes[3]
        network.disconnect(leaver)
        network.run(for: .seconds(1))
        for other in nodes.dropLast() {
            #expect(leaver.lastState(of: other) == .notConnected(ConnectionError(.closedLocally)))
            #expect(other.lastState(of: leaver) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))))
            #expect(!other.members.contains(leaver.peer.identifier))
        }
        #expect(leaver.members.isEmpty && leaver.openConnections == 0)
        #expect(Mesh.isFullMesh(Array(nodes.dropLast())))
    }

    /// Sealed datagrams arrive in any order and each at most once; forged, replayed and
    /// misaddressed ones are dropped without an answer.
    @Test(arguments: [true, false])
    func datagramsAreDeliveredOnceInAnyOrder(encrypted: Bool) throws {
        let (network, sender, receiver) = try Self.pair(encrypted: encrypted)
        try network.connect(sender, to: receiver)
        #expect(network.run(until: { Mesh.isFullMesh([sender, receiver]) }))
        let sealed = try (0..<50).map { try #require(network.sealDatagram("d\($0)", from: sender, to: receiver)) }
        #expect(sealed.allSatisfy { $0.1 == network.datagramAddress(of: receiver) })
        let source = network.datagramAddress(of: sender)
        for (datagram, _) in sealed.reversed() { network.deliverDatagram(datagram, to: receiver, from: source) }
        for _ in 0..<3 {
            for (datagram, _) in sealed { network.deliverDatagram(datagram, to: receiver, from: source) }
        }
        network.run(for: .seconds(1))
        let texts = receiver.messages.map { String(buffer: $0.message) }
        #expect(texts.count == 50 && Set(texts) == Set((0..<50).map { "d\($0)" }))
        // From another address: a sealed datagram still opens (its key is the proof), a plain one
        // must come from the peer's own address.
        let another = try SocketAddress(ipAddress: "10.0.0.99", port: 9000)
        let extra = try #require(network.sealDatagram("from elsewhere", from: sender, to: receiver))
        network.deliverDatagram(extra.0, to: receiver, from: another)
        network.run(for: .seconds(1))
        #expect(receiver.messages.count == (encrypted ? 51 : 50))
        // An unknown receiver ID is dropped before anything else is looked at.
        let genuineHeader = try DatagramHeader.decode(datagram: sealed[0].0).header
        var unknown = ByteBuffer()
        DatagramHeader(kind: genuineHeader.kind, receiverID: genuineHeader.receiverID &+ 1, epoch: 0, counter: 1_000).encode(into: &unknown)
        unknown.writeBytes([UInt8](repeating: 7, count: 32))
        network.deliverDatagram(unknown, to: receiver, from: source)
        network.run(for: .seconds(1))
        #expect(receiver.messages.count == (encrypted ? 51 : 50))
        // A flipped bit is dropped on a sealed connection.
        if encrypted {
            var forged = try #require(network.sealDatagram("forged", from: sender, to: receiver)).0
            let last = forged.writerIndex - 1
            forged.setInteger(forged.getInteger(at: last, as: UInt8.self)! ^ 1, at: last)
            network.deliverDatagram(forged, to: receiver, from: source)
            network.run(for: .seconds(1))
            #expect(receiver.messages.count == 51)
        }
    }
}
