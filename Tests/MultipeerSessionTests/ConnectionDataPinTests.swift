import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// HELLOs a listener was shown, through its admission callback.
private final class HelloLog: Sendable {
    private let hellos = Mutex<[Hello]>([])
    var all: [Hello] { hellos.withLock { $0 } }

    func admission(_ hello: Hello) -> ConnectionConfiguration.Admission {
        hellos.withLock { $0.append(hello) }
        return .admit
    }
}

/// docs/PROTOCOL.md §9.3: a dialer holds the listener to the certificate fingerprint and the peer
/// ID its connection data named.
@Suite("Connection data pin and peer check (docs/PROTOCOL.md §9.3)")
struct ConnectionDataPinTests {
    static let pki = try! TestPKI()
    static let alice = try! pki.peer("alice")
    static let bob = try! pki.peer("bob")
    static let mallory = try! pki.peer("mallory")
    static let token = Bytes16(high: 0x7070_7070_7070_7070, low: 0x4B4B_4B4B_4B4B_4B4B)

    static func fingerprint(_ identity: SecurityIdentity) throws -> SHA256Digest {
        try SHA256Digest(bytes: identity.certificate.sha256Fingerprint)
    }

    /// Alice dials with `token`, pinning `pin`; the listener is Bob's peer ID with `listenerIdentity`.
    fileprivate static func pair(
        preference: WireEncryptionPreference = .required, listenerIdentity: SecurityIdentity?,
        pin: SHA256Digest? = nil, expectedPeer: Bytes16? = nil, log: HelloLog
    ) throws -> MachinePair {
        try MachinePair(
            dialer: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: preference,
                tls: try TLSContext(identity: preference == .none ? nil : alice), token: token,
                expectedPeer: expectedPeer, expectedCertificateFingerprint: pin),
            listener: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: preference,
                tls: try TLSContext(identity: listenerIdentity)),
            admission: log.admission)
    }

    /// Another certificate (or the ephemeral one of a listener without identity): the dialer
    /// closes TLS right after the handshake, and the listener never receives a frame from it.
    @Test(arguments: [true, false])
    func aListenerWithAnotherCertificateNeverGetsTheDialersHello(listenerHasIdentity: Bool) throws {
        let log = HelloLog()
        var pair = try Self.pair(listenerIdentity: listenerHasIdentity ? Self.mallory : nil, pin: try Self.fingerprint(Self.bob), log: log)
        pair.run()
        #expect(pair.dialerSide.closedWith == ConnectionError(.certificateMismatch))
        #expect(pair.dialerSide.trustRequests.isEmpty && pair.dialerSide.established == nil)
        #expect(log.all.isEmpty, "the listener read our HELLO, token included")
        #expect(pair.listenerSide.trustRequests.isEmpty && pair.listenerSide.established == nil)
        // close_notify and nothing before it: a GOODBYE or any other frame would have ended the
        // listener with the peer's reason or a violation.
        #expect(pair.listenerSide.closedWith == ConnectionError(.connectionClosed))
        // The listener answers with its own close_notify (RFC 8446 §6.1): a record of an alert's
        // two bytes, its type and the tag.
        #expect(Array(pair.wireFromListener.suffix(24).prefix(5)) == [23, 3, 3, 0, 19])
    }

    /// A pinned listener that negotiates plaintext (an attacker rewrote its preamble) would
    /// read our token in the clear: the dialer sends nothing after its preamble.
    @Test func aPinnedListenerThatNegotiatesPlaintextGetsNoHelloInTheClear() throws {
        let log = HelloLog()
        var pair = try Self.pair(preference: .none, listenerIdentity: nil, pin: try Self.fingerprint(Self.bob), log: log)
        pair.run()
        #expect(pair.dialerSide.closedWith == ConnectionError(.certificateMismatch))
        #expect(pair.wireFromDialer.count == WireLimits.preambleLength)
        let token = Self.token.bytes
        #expect(!pair.wireFromDialer.indices.contains { start in pair.wireFromDialer[start...].starts(with: token) })
        pair.deliverTransportCloses()
        #expect(log.all.isEmpty)
        #expect(pair.listenerSide.closedWith == ConnectionError(.connectionClosed))
    }

    @Test func theRightCertificateConnects() throws {
        let log = HelloLog()
        var pair = try Self.pair(listenerIdentity: Self.bob, pin: try Self.fingerprint(Self.bob), expectedPeer: bobPeer.identifier, log: log)
        pair.run()
        #expect(pair.dialerSide.established != nil && pair.listenerSide.established != nil)
        #expect(log.all.map(\.token) == [Self.token])
    }

    /// Another peer ID in the listener's HELLO: GOODBYE 1 before anyone is asked to trust it.
    @Test func aListenerWithAnotherPeerIDIsLeftWithGoodbyeProtocolError() throws {
        let log = HelloLog()
        let carol = Bytes16(high: 0xCA201, low: 3)
        var pair = try Self.pair(listenerIdentity: Self.bob, expectedPeer: carol, log: log)
        pair.run()
        #expect(pair.dialerSide.closedWith == ConnectionError(.unexpectedPeer))
        #expect(pair.dialerSide.trustRequests.isEmpty && pair.dialerSide.established == nil)
        #expect(pair.listenerSide.closedWith == ConnectionError(.peerSaidGoodbye(.protocolError)))
        #expect(pair.listenerSide.established == nil)
    }
}

/// The same through SessionEngine: connection data whose fingerprint was altered.
@Suite("Connection data pin over loopback (docs/PROTOCOL.md §9.3)", .serialized)
struct ConnectionDataPinEngineTests {
    static let pki = try! TestPKI()

    @Test func anAlteredFingerprintEndsTheDialAndTheTokenStaysUnused() async throws {
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try Self.pki.peer("bob"))
        let data = try await alice.engine.connectionData(forPeer: bob.peer.identifier).get()
        var fingerprint = try #require(data.certificateFingerprint).bytes
        fingerprint[0] ^= 0x01
        let altered = try ConnectionData(
            encryptionPreference: data.encryptionPreference, token: data.token, forPeer: data.forPeer, peerID: data.peerID,
            certificateFingerprint: try SHA256Digest(bytes: fingerprint), endpoints: data.endpoints)
        bob.engine.connect(to: altered)
        let mismatch = PeerConnectionState.notConnected(ConnectionError(.certificateMismatch))
        #expect(try await eventually { bob.lastState(of: alice) == mismatch })
        #expect(bob.states(of: alice) == [.connecting, mismatch])
        #expect(alice.states(of: bob).isEmpty && alice.refusals(of: bob).isEmpty)
        // Alice never read the HELLO, so the token is unused and the genuine blob still works.
        bob.engine.connect(to: data)
        #expect(try await eventually { bob.isConnected(to: alice) && alice.isConnected(to: bob) })
        await alice.shutdown()
        await bob.shutdown()
    }
}
