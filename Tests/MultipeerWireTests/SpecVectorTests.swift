import Foundation
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

/// The vectors of docs/PROTOCOL.md §11, read from the spec itself so the two cannot drift apart.
struct SpecVectors {
    let vectors: [String: [UInt8]]

    static func load() throws -> SpecVectors {
        SpecVectors(vectors: try SpecVectorFile.load())
    }
}

@Suite("Spec test vectors (docs/PROTOCOL.md §11)")
struct SpecVectorTests {
    let spec: SpecVectors
    init() throws { spec = try SpecVectors.load() }

    static let dialerPreamble = try! Preamble(encryptionPreference: .optional, hasIdentity: true)
    static let listenerPreamble = try! Preamble(encryptionPreference: .required, hasIdentity: true)
    static let echo = Hello.echo(dialer: dialerPreamble, listener: listenerPreamble)
    static let token = Bytes16(bytes: Array(0x10..<0x20))!
    static let v6Loopback = Bytes16(high: 0, low: 1)

    static let expectedFrames: [String: Frame] = [
        "frame-hello-connection-data": .hello(try! Hello(
            purpose: .connectionData, preambleEcho: echo, token: token,
            listenPort: 50001, datagramPort: 50002, datagramReceiverID: 0x0102_0304, peerID: alice)),
        "frame-hello-answer": .hello(try! Hello(
            purpose: .answer, preambleEcho: echo, listenPort: 50003, datagramPort: 0, datagramReceiverID: 0, peerID: bob)),
        "frame-hello-resumption": .hello(try! Hello(
            version: 2, purpose: .resumption, preambleEcho: echo, token: Bytes16(bytes: Array(0x60..<0x70))!,
            listenPort: 50001, datagramPort: 50002, datagramReceiverID: 0x0102_0304, peerID: alice)),
        "frame-resume": .resume(try! ResumeProof(
            proof: hexBytes("4d90500045b61a797eea12b9780f1876e598941e9554d802b3b48dd3d1ec6c32"), delivered: 0x0102_0304_0506_0708)),
        "frame-acknowledge": .acknowledge(delivered: 0x0102_0304_0506_0708),
        "frame-trust-accepted": .trust(.accepted),
        "frame-invitation": .invitation(try! Invitation(timeoutMilliseconds: 30_000, context: buffer("game=1"))),
        "frame-invitation-response-declined": .invitationResponse(try! InvitationAnswer(.declined)),
        "frame-pairing-commit": .pairingCommit(try! SHA256Digest(bytes: hexBytes("c37c8a5b4585d3e42f936beef8df28e682cf84478b730a9f113418f511451795"))),
        "frame-pairing-nonce": .pairingNonce(try! PairingNonce(bytes: Array(0..<32))),
        "frame-invitation-response-accepted": .invitationResponse(try! InvitationAnswer(.accepted, connectionData: aliceForBob)),
        "frame-mesh-introduction": .meshIntroduction(try! MeshIntroduction(entries: [
            .init(peerID: bob, endpoint: try! WireEndpoint(address: .ipv4(0x7F00_0001), port: 50003)),
            .init(peerID: alice, endpoint: try! WireEndpoint(address: .ipv6(v6Loopback), port: 50001)),
        ])),
        "frame-goodbye-duplicate-connection": .goodbye(.duplicateConnection),
        "frame-ping": .ping(0x0102_0304_0506_0708),
        "frame-pong": .pong(0x0102_0304_0506_0708),
        "frame-message-end": .message(buffer("hello"), isEnd: true),
        "frame-message-fragment": .message(buffer("hel"), isEnd: false),
        "frame-message-empty": .message(ByteBuffer(), isEnd: true),
        "frame-stream-open": .streamOpen(channel: 1, name: "chat"),
        "frame-stream-resume": .streamResume(channel: 3, ordinal: 2, name: "chat"),
        "frame-stream-ack": .streamAcknowledge(channel: 1, received: 262_144, closed: false),
        "frame-stream-ack-closed": .streamAcknowledge(channel: 1, received: 3, closed: true),
        "frame-stream-data": .streamData(channel: 1, buffer("abc")),
        "frame-stream-close": .streamClose(channel: 1),
        "frame-stream-reset": .streamReset(channel: 2, code: .cancelled),
        "frame-window-update": .windowUpdate(channel: 0, increment: 65_536),
        "frame-resource-offer": .resourceOffer(channel: 3, try! ResourceOffer(
            size: 1 << 20, transferID: Bytes16(high: 0x0001_0203_0405_0607, low: 0x0809_0A0B_0C0D_0E0F), name: "photo.jpg")),
        "frame-resource-offer-send-id": .resourceOffer(channel: 3, try! ResourceOffer(
            size: 1 << 20, transferID: Bytes16(high: 0x0001_0203_0405_0607, low: 0x0809_0A0B_0C0D_0E0F), name: "photo.jpg",
            resumed: false, sendID: 0x1122_3344_5566_7788)),
        "frame-resource-offer-resumed": .resourceOffer(channel: 5, try! ResourceOffer(
            size: 1 << 20, transferID: Bytes16(high: 0x0001_0203_0405_0607, low: 0x0809_0A0B_0C0D_0E0F), name: "photo.jpg",
            resumed: true, sendID: 0x1122_3344_5566_7788)),
        "frame-resource-chunk": .resourceChunk(channel: 3, buffer([0x00, 0xFF])),
        "frame-resource-complete": .resourceComplete(channel: 3, sha256: try! SHA256Digest(bytes: hexBytes(
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"))),
        "frame-resource-cancel": .resourceCancel(channel: 3, reason: .cancelled),
        "frame-resource-accept": .resourceAccept(channel: 3, offset: 262_144),
        "frame-resource-received": .resourceReceived(channel: 3),
    ]

    @Test func everyFrameTypeHasAVector() {
        let covered = Set(Self.expectedFrames.values.map(\.type))
        #expect(covered == Set(FrameType.allCases))
        let specFrames = Set(spec.vectors.keys.filter { $0.hasPrefix("frame-") })
        #expect(specFrames == Set(Self.expectedFrames.keys))
    }

    @Test(arguments: SpecVectorTests.expectedFrames.keys.sorted())
    func frameVector(name: String) throws {
        let bytes = try #require(spec.vectors[name], "vector \(name) missing from the spec")
        let expected = try #require(Self.expectedFrames[name])
        #expect(try Frame.decode(exactly: buffer(bytes)) == expected)
        #expect(try encoded(expected) == bytes)
        // Byte by byte gives the same frame as all at once.
        #expect(try decodeAll(bytes, pieceSizes: [1]) == [expected])
    }

    @Test func preambleVectors() throws {
        let cases: [(String, Preamble)] = [
            ("preamble-optional-identity", Self.dialerPreamble),
            ("preamble-required-identity", Self.listenerPreamble),
            ("preamble-none-no-identity", try Preamble(encryptionPreference: .none, hasIdentity: false)),
        ]
        for (name, preamble) in cases {
            let bytes = try #require(spec.vectors[name])
            #expect(try Preamble.decode(buffer(bytes)) == preamble)
            var out = ByteBuffer()
            preamble.encode(into: &out)
            #expect(Array(out.readableBytesView) == bytes)
        }
    }

    @Test func peerIDVector() throws {
        let bytes = try #require(spec.vectors["peer-id-alice"])
        #expect(try WirePeerID.decode(exactly: buffer(bytes)) == alice)
        var out = ByteBuffer()
        alice.encode(into: &out)
        #expect(Array(out.readableBytesView) == bytes)
    }

    static var aliceForBob: ConnectionData {
        try! ConnectionData(
            encryptionPreference: .required, token: token, forPeer: bob.identifier, peerID: alice,
            certificateFingerprint: try! SHA256Digest(bytes: hexBytes(
                "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90")),
            endpoints: [
                try! WireEndpoint(address: .ipv4(0x7F00_0001), port: 50001),
                try! WireEndpoint(address: .ipv6(v6Loopback), port: 50001),
            ])
    }

    @Test func connectionDataVector() throws {
        let bytes = try #require(spec.vectors["connection-data-alice-for-bob"])
        let expected = try ConnectionData(
            encryptionPreference: .required, token: Self.token, forPeer: bob.identifier, peerID: alice,
            certificateFingerprint: try SHA256Digest(bytes: hexBytes(
                "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90")),
            endpoints: [
                try WireEndpoint(address: .ipv4(0x7F00_0001), port: 50001),
                try WireEndpoint(address: .ipv6(Self.v6Loopback), port: 50001),
            ])
        #expect(try ConnectionData.decode(buffer(bytes)) == expected)
        var out = ByteBuffer()
        expected.encode(into: &out)
        #expect(Array(out.readableBytesView) == bytes)
    }

    @Test func datagramHeaderVector() throws {
        let bytes = try #require(spec.vectors["datagram-header-sealed"])
        let header = DatagramHeader(kind: .sealed, receiverID: 0x0102_0304, epoch: 2, counter: 5)
        var out = ByteBuffer()
        header.encode(into: &out)
        #expect(Array(out.readableBytesView) == bytes)
        // A sealed datagram needs at least a tag after the header.
        let decoded = try DatagramHeader.decode(datagram: buffer(bytes + [UInt8](repeating: 0xAA, count: 16)))
        #expect(decoded.header == header)
        #expect(decoded.body.readableBytes == 16)
    }

    @Test func theSpecVectorsAreAllUsed() {
        let used: Set<String> = Set(Self.expectedFrames.keys).union([
            "preamble-optional-identity", "preamble-required-identity", "preamble-none-no-identity",
            "peer-id-alice", "connection-data-alice-for-bob", "datagram-header-sealed",
            // Checked by MultipeerCryptoTests (SpecCryptoVectorTests).
            "datagram-sealed-hello", "pairing-code-digest", "resumption-proof-dialer", "resumption-proof-listener",
        ])
        #expect(Set(spec.vectors.keys) == used)
    }
}
