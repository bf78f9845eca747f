import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// One resumption connection between two machines (docs/PROTOCOL.md §7.9): HELLO purpose 4, then
/// RESUME each way; no pairing and no trust step. And the version rules around it.
@Suite("Resumption handshake")
struct ResumptionHandshakeTests {
    static let pki = try! TestPKI(name: "Resumption")
    static let id = Bytes16(high: 0x1D, low: 0x1D)

    static func keys(_ byte: UInt8 = 7) -> ResumptionKeys {
        ResumptionKeys(id: id.bytes, key: SecureBytes(copying: [UInt8](repeating: byte, count: 32)))
    }

    /// A pair whose dialer resumes with `dialerKeys` and whose listener grants `listenerKeys`,
    /// the dialer with `dialerIdentity` (the listener expects `expectedFingerprint`).
    static func pair(
        dialerKeys: ResumptionKeys = keys(), listenerKeys: ResumptionKeys = keys(), dialerVersion: UInt8 = 2,
        expectedFingerprint: [UInt8]? = nil, dialerIdentity: SecurityIdentity? = nil
    ) throws -> MachinePair {
        let listenerIdentity = try pki.peer("bob")
        let dialerIdentity = try dialerIdentity ?? pki.peer("alice")
        let expected = expectedFingerprint ?? dialerIdentity.certificate.sha256Fingerprint
        var dialer = ConnectionConfiguration(
            role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: try TLSContext(identity: dialerIdentity),
            purpose: .resumption, token: id, datagramPort: 40_001, datagramReceiverID: 7, expectedPeer: bobPeer.identifier,
            expectedCertificateFingerprint: try SHA256Digest(bytes: listenerIdentity.certificate.sha256Fingerprint),
            resumption: .init(keys: dialerKeys, delivered: 3, peerCertificateFingerprint: nil))
        dialer.maxProtocolVersion = dialerVersion
        var listener = ConnectionConfiguration(
            role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: try TLSContext(identity: listenerIdentity),
            listenPort: 40_000)
        listener.maxProtocolVersion = 2
        let grant = ConnectionConfiguration.ResumptionGrant(keys: listenerKeys, delivered: 5, peerCertificateFingerprint: expected)
        return try MachinePair(dialer: dialer, listener: listener, admission: { hello in
            hello.purpose == .resumption && hello.token == id ? .resume(grant) : .refuse(.unknownToken)
        })
    }

    @Test func bothSidesResumeWithoutAskingTheApp() throws {
        var pair = try Self.pair()
        pair.run()
        let dialer = try #require(pair.dialerSide.established)
        let listener = try #require(pair.listenerSide.established)
        #expect(dialer.resumedPeerDelivered == 5 && listener.resumedPeerDelivered == 3)
        #expect(dialer.protocolVersion == 2 && listener.protocolVersion == 2)
        #expect(pair.dialerSide.trustRequests.isEmpty && pair.listenerSide.trustRequests.isEmpty)
        // The session keeps the keys of the connection that made the member: a resumption
        // exports none (a loss between the two RESUMEs must leave both sides with the same).
        #expect(dialer.resumptionKeys == nil && listener.resumptionKeys == nil)
        // Messages and acknowledgements flow.
        try pair.send(.acknowledge(delivered: 1), fromDialer: true)
        pair.pump()
        #expect(pair.listenerSide.delivered == [.acknowledge(delivered: 1)])
    }

    /// Holding the ID is not enough: without the old session's key the proof fails. Keys that
    /// differ fail both proofs, so each side refuses the other's, whoever holds the wrong one.
    @Test(arguments: [true, false])
    func aWrongKeyIsRefused(dialerIsWrong: Bool) throws {
        var pair = try Self.pair(dialerKeys: dialerIsWrong ? Self.keys(8) : Self.keys(), listenerKeys: dialerIsWrong ? Self.keys() : Self.keys(8))
        pair.run()
        pair.deliverTransportCloses()
        #expect(pair.dialerSide.established == nil && pair.listenerSide.established == nil)
        // The listener checks the dialer's proof (sent with its HELLO) first: GOODBYE 9. The dialer
        // finds the listener's wrong before that GOODBYE arrives, and takes it for another host
        // at the peer's address: an error its session may retry (§7.9), not a refusal.
        #expect(pair.listenerSide.closedWith == ConnectionError(.notAdmitted(.unknownToken)))
        #expect(pair.dialerSide.closedWith == ConnectionError(.unexpectedPeer))
    }

    /// A resumption must show the certificate the member had.
    @Test func anotherCertificateIsRefused() throws {
        var pair = try Self.pair(expectedFingerprint: [UInt8](repeating: 1, count: 32))
        pair.run()
        #expect(pair.listenerSide.established == nil)
        #expect(pair.listenerSide.closedWith == ConnectionError(.notAdmitted(.unknownToken)))
    }

    /// On a version 1 connection, version 2's frames and purpose are violations, as they were.
    @Test func versionOneKnowsNothingOfResumption() throws {
        var resumption = try Self.pair(dialerVersion: 1)
        resumption.run()
        #expect(resumption.dialerSide.established == nil && resumption.listenerSide.established == nil)
        #expect(resumption.dialerSide.closedWith?.code == .protocolViolation)

        // A peer of release 0.1.0 offers version 1 only.
        var oldDialer = ConnectionConfiguration(
            role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: try TLSContext(identity: try Self.pki.peer("alice")))
        oldDialer.maxProtocolVersion = 1
        let listener = ConnectionConfiguration(
            role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: try TLSContext(identity: try Self.pki.peer("bob")))
        var plain = try MachinePair(dialer: oldDialer, listener: listener)
        plain.run()
        #expect(plain.listenerSide.established?.protocolVersion == 1)
        #expect(plain.dialerSide.established?.protocolVersion == 1)
        #expect(plain.dialerSide.established?.resumptionKeys == nil)
        #expect(throws: SendRefusal.self) { try plain.dialer.send(.acknowledge(delivered: 0)) }
        // An ACK forced onto the wire anyway.
        var ack = ByteBuffer()
        try Frame.acknowledge(delivered: 0).encode(into: &ack)
        let engine = try #require(plain.dialer.tlsEngine)
        try engine.write(ack)
        let sealed = try #require(engine.takeOutbound())
        plain.inject(Array(sealed.readableBytesView), fromDialer: true)
        plain.pump()
        #expect(plain.listenerSide.closedWith?.code == .protocolViolation)
    }

    /// A resumption over plaintext is never attempted: there are no keys to prove anything with.
    @Test func aResumptionNeedsTLS() throws {
        var dialer = ConnectionConfiguration(
            role: .dialer, localPeer: alicePeer, encryptionPreference: .none, tls: try TLSContext(identity: nil),
            purpose: .resumption, token: Self.id, resumption: .init(keys: Self.keys(), delivered: 0, peerCertificateFingerprint: nil))
        dialer.maxProtocolVersion = 2
        var listener = ConnectionConfiguration(role: .listener, localPeer: bobPeer, encryptionPreference: .none, tls: try TLSContext(identity: nil))
        listener.maxProtocolVersion = 2
        var pair = try MachinePair(dialer: dialer, listener: listener)
        pair.run()
        #expect(pair.dialerSide.established == nil && pair.listenerSide.admissionRequests.isEmpty)
    }
}
