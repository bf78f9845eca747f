import Foundation
@testable import MultipeerConnectivity
import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import Synchronization
import Testing

/// Records what a session tells its delegate, and answers certificate questions by a policy.
final class RecordingDelegate: MCSessionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _states: [(MCPeerID, MCSessionState)] = []
    private var _data: [(MCPeerID, Data)] = []
    private var _certificates: [(MCPeerID, [Any]?)] = []
    private var _onQueue = true
    let accept: @Sendable (MCPeerID, [Any]?) -> Bool

    init(accept: @escaping @Sendable (MCPeerID, [Any]?) -> Bool = { _, _ in true }) { self.accept = accept }

    func states(of peer: MCPeerID) -> [MCSessionState] { lock.withLock { _states.filter { $0.0 == peer }.map(\.1) } }
    func data(from peer: MCPeerID) -> [Data] { lock.withLock { _data.filter { $0.0 == peer }.map(\.1) } }
    var certificates: [(MCPeerID, [Any]?)] { lock.withLock { _certificates } }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        lock.withLock { _states.append((peerID, state)) }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        lock.withLock { _data.append((peerID, data)) }
    }

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {}

    func session(_ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID, certificateHandler: @escaping (Bool) -> Void) {
        lock.withLock { _certificates.append((peerID, certificate)) }
        certificateHandler(accept(peerID, certificate))
    }
}

/// A delegate that does not implement the certificate method: Apple's default applies.
final class MinimalDelegate: MCSessionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _states: [MCSessionState] = []
    var states: [MCSessionState] { lock.withLock { _states } }
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { lock.withLock { _states.append(state) } }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {}
}


@Suite("MCSession, Apple's API over loopback", .serialized)
struct MCSessionTests {
    static let pki = try! TestPKI()

    /// `dialer` connects to `listener` the Apple way: connection data made by the listener for the dialer.
    static func connect(_ dialer: MCSession, to listener: MCSession) async throws {
        let data = try await listener.nearbyConnectionData(forPeer: dialer.myPeerID)
        dialer.connectPeer(listener.myPeerID, withNearbyConnectionData: data)
    }

    /// An empty reliable message adds no payload bytes; it still goes out at once, not at the
    /// next flush some other traffic makes (keepalive set far off, so only the fix can pass).
    @Test func anEmptyMessageIsSentAtOnce() async throws {
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.keepaliveInterval = .seconds(60)
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try Self.pki.peer("alice"), configuration: configuration)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try Self.pki.peer("bob"), configuration: configuration)
        let events = bob.events()
        try await Self.connect(alice, to: bob)
        #expect(try await eventually { alice.connectedPeers.count == 1 && bob.connectedPeers.count == 1 })
        try alice.send(Data(), toPeers: [bob.myPeerID], with: .reliable)
        let received = try await firstMatch(in: events, seconds: 10) { event -> Data? in
            if case .dataReceived(let data, _) = event { return data }
            return nil
        }
        #expect(received.isEmpty)
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    @Test func appleShapedSessionsConnectAuthenticateAndExchangeData() async throws {
        let aliceIdentity = try Self.pki.peer("alice")
        let bobIdentity = try Self.pki.peer("bob")
        let alicePeer = MCPeerID(displayName: "alice")
        let bobPeer = MCPeerID(displayName: "bob")
        let anchors = [Self.pki.root]
        let verify: @Sendable (MCPeerID, [Any]?) -> Bool = { _, certificate in
            let chain = (certificate as? [SecCertificate])?.map(\.certificate) ?? []
            return TrustEvaluation(anchors: anchors).evaluate(chain).isTrusted
        }
        let alice = MCSession(
            peer: alicePeer, securityIdentity: [SecIdentity(aliceIdentity), SecCertificate(Self.pki.intermediate)],
            encryptionPreference: .required, configuration: .loopbackOnly)
        let bob = MCSession(
            peer: bobPeer, securityIdentity: [SecIdentity(bobIdentity)], encryptionPreference: .required, configuration: .loopbackOnly)
        let aliceDelegate = RecordingDelegate(accept: verify)
        let bobDelegate = RecordingDelegate(accept: verify)
        alice.delegate = aliceDelegate
        bob.delegate = bobDelegate
        #expect(alice.securityIdentity?.count == 2)

        try await Self.connect(bob, to: alice)
        #expect(try await eventually { aliceDelegate.states(of: bobPeer) == [.connecting, .connected] && bobDelegate.states(of: alicePeer) == [.connecting, .connected] })
        #expect(alice.connectedPeers == [bobPeer])
        #expect(bob.connectedPeers == [alicePeer])
        // The certificate handler saw the peer's chain as SecCertificates, leaf first.
        let seen = try #require(aliceDelegate.certificates.first)
        #expect(seen.0 == bobPeer)
        #expect((seen.1 as? [SecCertificate])?.first.flatMap { SecCertificateCopySubjectSummary($0) } == "bob")

        try bob.send(Data("hello alice".utf8), toPeers: [alicePeer], with: .reliable)
        try alice.send(Data("hello bob".utf8), toPeers: [bobPeer], with: .reliable)
        #expect(try await eventually { aliceDelegate.data(from: bobPeer).count == 1 && bobDelegate.data(from: alicePeer).count == 1 })
        #expect(aliceDelegate.data(from: bobPeer) == [Data("hello alice".utf8)])

        await alice.disconnectAndWait()
        #expect(try await eventually { aliceDelegate.states(of: bobPeer).last == .notConnected && bobDelegate.states(of: alicePeer).last == .notConnected })
        #expect(alice.connectedPeers.isEmpty)
        await bob.disconnectAndWait()
    }

    @Test func aRejectedCertificateNeverConnects() async throws {
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try Self.pki.peer("alice"), configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try TestPKI(name: "Rogue").peer("bob"), configuration: .loopbackOnly)
        let anchors = [Self.pki.root]
        let aliceDelegate = RecordingDelegate { _, certificate in
            TrustEvaluation(anchors: anchors).evaluate((certificate as? [SecCertificate])?.map(\.certificate) ?? []).isTrusted
        }
        let bobDelegate = RecordingDelegate()
        alice.delegate = aliceDelegate
        bob.delegate = bobDelegate
        try await Self.connect(bob, to: alice)
        #expect(try await eventually { bobDelegate.states(of: alice.myPeerID).last == .notConnected })
        #expect(try await eventually { aliceDelegate.states(of: bob.myPeerID).last == .notConnected })
        #expect(!bobDelegate.states(of: alice.myPeerID).contains(.connected))
        #expect(alice.connectedPeers.isEmpty && bob.connectedPeers.isEmpty)
    }

    @Test func withoutTheCertificateMethodEveryPeerIsAccepted() async throws {
        let alice = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let bob = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let delegate = MinimalDelegate()
        alice.delegate = delegate
        try await Self.connect(bob, to: alice)
        #expect(try await eventually { delegate.states == [.connecting, .connected] })
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    @Test func malformedIdentityArraysAreInvalidParameter() async throws {
        let session = MCSession(peer: MCPeerID(displayName: "x"), securityIdentity: ["not an identity"], encryptionPreference: .required)
        do {
            _ = try await session.nearbyConnectionData(forPeer: MCPeerID(displayName: "y"))
            Issue.record("an unusable session made connection data")
        } catch let error as MCError {
            #expect(error.code == .invalidParameter)
        }
        #expect(throws: MCError.self) { try session.send(Data([1]), toPeers: [MCPeerID(displayName: "y")], with: .reliable) }
        let empty = MCSession(peer: MCPeerID(displayName: "x"), securityIdentity: [], encryptionPreference: .required)
        #expect(throws: MCError.self) { try empty.connect(to: MCPeerID(displayName: "y"), nearbyConnectionData: Data()) }
    }

    @Test func badConnectionDataIsInvalidParameterNeverACrash() async throws {
        let alice = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let bob = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let carol = MCPeerID(displayName: "carol")
        let good = try await alice.nearbyConnectionData(forPeer: bob.myPeerID)
        let cases: [(MCPeerID, Data)] = [
            (alice.myPeerID, Data()),
            (alice.myPeerID, Data("garbage".utf8)),
            (alice.myPeerID, good.prefix(good.count - 1)),
            (alice.myPeerID, good + Data([0])),
            (alice.myPeerID, Data(repeating: 0x4D, count: 100_000)),
            (carol, good),  // made by alice, not carol
        ]
        for (peer, data) in cases {
            do {
                try bob.connect(to: peer, nearbyConnectionData: data)
                Issue.record("accepted \(data.count) bytes for \(peer.displayName)")
            } catch {
                #expect(error.code == .invalidParameter)
            }
        }
        // Made for bob: carol's session cannot use it.
        let carolSession = MCSession(peer: carol, securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        #expect(throws: MCError.self) { try carolSession.connect(to: alice.myPeerID, nearbyConnectionData: good) }
        // Apple's non-throwing call reports the failure to the delegate.
        let delegate = RecordingDelegate()
        bob.delegate = delegate
        bob.connectPeer(alice.myPeerID, withNearbyConnectionData: Data("garbage".utf8))
        #expect(try await eventually { delegate.states(of: alice.myPeerID) == [.notConnected] })
        await alice.disconnectAndWait()
    }

    @Test func sendErrorsMatchApple() throws {
        let session = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let stranger = MCPeerID(displayName: "stranger")
        do {
            try session.send(Data([1]), toPeers: [stranger], with: .reliable)
            Issue.record("sent to a stranger")
        } catch MCError.notConnected {
        } catch {
            Issue.record("wrong error \(error)")
        }
        #expect(throws: MCError(.invalidParameter, reason: "no peers given")) { try session.sendChecked(Data([1]), toPeers: [], with: .reliable) }
        #expect(throws: MCError(.invalidParameter, reason: "no peers given")) { try session.sendChecked(Data([1]), toPeers: [], with: .unreliable) }
        // No datagram limit for unreliable messages (Apple has none); 16 MiB, as for reliable ones.
        do {
            try session.sendChecked(Data(count: 8_193), toPeers: [stranger], with: .unreliable)
            Issue.record("unreliable sent to a stranger")
        } catch {
            #expect(error.code == .notConnected)
        }
        do {
            try session.sendChecked(Data(count: 16 << 20 + 1), toPeers: [stranger], with: .unreliable)
            Issue.record("an unreliable message over 16 MiB was accepted")
        } catch {
            #expect(error.code == .invalidParameter)
        }
        do {
            try session.sendChecked(Data([1]), toPeers: [stranger], with: .unreliable)
            Issue.record("unreliable sent to a stranger")
        } catch {
            #expect(error.code == .notConnected)
        }
    }

    @Test func asyncAPIStreamsEventsAndDecidesTrust() async throws {
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try Self.pki.peer("alice"), configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try Self.pki.peer("bob"), configuration: .loopbackOnly)
        let anchors = [Self.pki.root]
        for session in [alice, bob] {
            session.setCertificateEvaluator { _, certificates in
                TrustEvaluation(anchors: anchors).evaluate(certificates?.map(\.certificate) ?? []).isTrusted
            }
        }
        let events = alice.events()
        try await Self.connect(bob, to: alice)
        let bobPeer = bob.myPeerID
        let (states, decisions) = try await withDeadline(seconds: 10) { () async -> ([MCSessionState], [(MCPeerID, String?, Bool)]) in
            var iterator = events.makeAsyncIterator()
            var states: [MCSessionState] = []
            var decisions: [(MCPeerID, String?, Bool)] = []
            while states.last != .connected, let event = await iterator.next() {
                if case .peerStateChanged(let peer, let state) = event, peer == bobPeer { states.append(state) }
                if case .certificateDecided(let peer, let certificates, let accepted) = event {
                    decisions.append((peer, certificates?.first.flatMap { SecCertificateCopySubjectSummary($0) }, accepted))
                }
            }
            return (states, decisions)
        }
        #expect(states == [.connecting, .connected])
        #expect(decisions.map(\.2) == [true])
        #expect(decisions.allSatisfy { $0.0 == bobPeer && $0.1 == "bob" })
        // Each side reports its own view; wait for Bob's before he sends.
        #expect(try await eventually { bob.connectedPeers == [alice.myPeerID] })
        try await bob.send(Data("async hello".utf8), to: [alice.myPeerID])
        let (data, sender) = try await firstMatch(in: events) { event -> (Data, MCPeerID)? in
            if case .dataReceived(let data, let peer) = event { return (data, peer) }
            return nil
        }
        #expect(data == Data("async hello".utf8))
        #expect(sender == bobPeer)
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    /// Both async evaluators start on a network thread, not behind a hop through the global
    /// executor (a thread switch each way on the establishment's critical path).
    @Test func asyncEvaluatorsStartOnTheNetworkThread() async throws {
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try Self.pki.peer("alice"), configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try Self.pki.peer("bob"), configuration: .loopbackOnly)
        let onNetworkThread = Mutex<[String: Bool]>([:])
        // The session's own thread, before and after the evaluator suspends.
        let aliceLoop = (alice.networkTaskExecutor as! EventLoopTaskExecutor).eventLoop
        let bobLoop = (bob.networkTaskExecutor as! EventLoopTaskExecutor).eventLoop
        alice.setCertificateEvaluator { _, _ in
            let before = aliceLoop.inEventLoop
            await Task.yield()
            onNetworkThread.withLock { $0["certificate"] = before && aliceLoop.inEventLoop }
            return true
        }
        bob.setTrustEvaluator { _ in
            let before = bobLoop.inEventLoop
            await Task.yield()
            onNetworkThread.withLock { $0["trust"] = before && bobLoop.inEventLoop }
            return true
        }
        try await Self.connect(bob, to: alice)
        #expect(try await eventually { alice.connectedPeers.count == 1 && bob.connectedPeers.count == 1 })
        #expect(onNetworkThread.withLock { $0 } == ["certificate": true, "trust": true])
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }
}

@Suite("MCSession limits", .serialized)
struct MCSessionLimitTests {
    @Test func aNinthPeerIsRefusedWithAClearErrorOnBothSides() async throws {
        func session(_ name: String) -> MCSession {
            MCSession(peer: MCPeerID(displayName: name), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        }
        let hub = session("hub")
        let hubEvents = hub.events()
        var members: [MCSession] = []
        for index in 0..<7 {
            let member = session("member\(index)")
            try await MCSessionTests.connect(member, to: hub)
            members.append(member)
        }
        #expect(try await eventually(seconds: 15) { hub.connectedPeers.count == 7 && members.allSatisfy { $0.connectedPeers.count == 7 } })
        let ninth = session("ninth")
        let ninthEvents = ninth.events()
        try await MCSessionTests.connect(ninth, to: hub)
        let hubPeer = hub.myPeerID
        let ninthPeer = ninth.myPeerID
        let ninthError = try await firstMatch(in: ninthEvents) { event -> MCError? in
            if case .connectionFailed(let peer, let error) = event, peer == hubPeer { return error }
            return nil
        }
        #expect(ninthError.code == .unavailable)
        #expect(ninthError.reason.contains("8 peers"))
        let hubError = try await firstMatch(in: hubEvents) { event -> MCError? in
            if case .connectionRefused(let peer, let error) = event, peer == ninthPeer { return error }
            return nil
        }
        #expect(hubError.code == .unavailable)
        #expect(hub.connectedPeers.count == 7)
        for member in members + [hub, ninth] { await member.disconnectAndWait() }
    }
}
