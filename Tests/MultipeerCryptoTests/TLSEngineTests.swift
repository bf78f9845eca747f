import Logging
@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Testing

/// Two engines wired back to back in memory.
struct EnginePair {
    let client: TLSEngine
    let server: TLSEngine

    /// `recordLayer` nil: as a connection picks it (the switch, else the guard).
    init(
        clientIdentity: SecurityIdentity?, serverIdentity: SecurityIdentity?, recordsPerKeyUpdate: UInt64 = 1 << 24,
        recordLayer: TLSRecordLayerPolicy? = nil, serverRecordLayer: TLSRecordLayerPolicy? = nil,
        recordLayerGuard: TLSRecordLayerGuard = .process, logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws {
        client = try TLSEngine(
            context: TLSContext(identity: clientIdentity), role: .client, recordsPerKeyUpdate: recordsPerKeyUpdate,
            recordLayer: recordLayer, recordLayerGuard: recordLayerGuard, logger: logger)
        server = try TLSEngine(
            context: TLSContext(identity: serverIdentity), role: .server, recordsPerKeyUpdate: recordsPerKeyUpdate,
            recordLayer: serverRecordLayer ?? recordLayer, recordLayerGuard: recordLayerGuard, logger: logger)
    }

    /// Moves ciphertext both ways until neither side has anything to send.
    func pump() {
        var moved = true
        while moved {
            moved = false
            if let bytes = client.takeOutbound() { server.receive(bytes); moved = true }
            if let bytes = server.takeOutbound() { client.receive(bytes); moved = true }
        }
    }

    func handshake() throws {
        for _ in 0..<10 {
            let clientDone = try client.advanceHandshake() == .complete
            let serverDone = try server.advanceHandshake() == .complete
            pump()
            if clientDone && serverDone { return }
        }
        Issue.record("handshake did not finish")
    }

    func read(_ engine: TLSEngine) throws -> [UInt8] {
        guard case .plaintext(let bytes) = try engine.readPlaintext() else { return [] }
        return Array(bytes.readableBytesView)
    }
}

@Suite("TLS engine (OpenSSL over callback BIOs)")
struct TLSEngineTests {
    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    @Test func mutualAuthenticationShowsEachSideTheOthersChain() throws {
        let alice = try pki.peer("alice")
        let bob = try pki.peer("bob", algorithm: .ecdsaP256)
        let pair = try EnginePair(clientIdentity: alice, serverIdentity: bob)
        try pair.handshake()
        #expect(pair.client.protocolVersion == "TLSv1.3")
        #expect(pair.client.negotiatedALPN == "mpcp/1")
        #expect(pair.server.negotiatedALPN == "mpcp/1")
        #expect(pair.client.peerCertificateChain == bob.certificateChain)
        #expect(pair.server.peerCertificateChain == alice.certificateChain)
    }

    @Test func withoutIdentitiesTheServerShowsAnEphemeralCertificateAndTheClientNone() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        #expect(pair.client.peerCertificateChain.first?.subjectCommonName == "ephemeral")
        #expect(pair.server.peerCertificateChain.isEmpty)
    }

    @Test func dataFlowsBothWaysAndCloseIsSeen() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        let big = ByteBuffer(repeating: 0x42, count: 100_000)
        try pair.client.write(big)
        try pair.server.write(ByteBuffer(string: "pong"))
        pair.pump()
        #expect(try pair.read(pair.server) == Array(big.readableBytesView))
        #expect(try pair.read(pair.client) == Array("pong".utf8))
        pair.client.close()
        pair.pump()
        #expect(try pair.server.readPlaintext() == .closed)
    }

    /// A frame's head and its bulk payload are sealed as one stream, in records of at most
    /// 16 KiB, without the caller joining them first.
    @Test(arguments: [0, 1, 16_371, 16_372, 16_373, 65_536, 100_000])
    func headAndBodyAreSealedAsOneStream(bodyLength: Int) throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        let head = ByteBuffer(bytes: Array(0..<12))
        var body = ByteBuffer()
        for index in 0..<bodyLength { body.writeInteger(UInt8(truncatingIfNeeded: index * 7)) }
        try pair.client.write(head: head, body: body)
        let ciphertext = try #require(pair.client.takeOutbound())
        let expectedRecords = (12 + bodyLength + 16_383) / 16_384
        #expect(ciphertext.readableBytes == 12 + bodyLength + expectedRecords * 22)
        pair.server.receive(ciphertext)
        #expect(try pair.read(pair.server) == Array(head.readableBytesView) + Array(body.readableBytesView))
    }

    /// Opening into a caller's buffer: partial reads keep the rest for later, an empty source
    /// says wouldBlock, and received ciphertext is only held until OpenSSL consumes it.
    @Test func readingIntoACallersBufferTakesAsMuchAsFits() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        let message = Array("the quick brown fox".utf8)
        try pair.client.write(ByteBuffer(bytes: message))
        let ciphertext = try #require(pair.client.takeOutbound())
        // Split mid-record: nothing opens until the rest arrives.
        var first = ciphertext
        let head = first.readSlice(length: 10)!
        pair.server.receive(head)
        var scratch = [UInt8](repeating: 0, count: 5)
        #expect(try scratch.withUnsafeMutableBytes { try pair.server.read(into: $0) } == .wouldBlock)
        pair.server.receive(first)
        var received: [UInt8] = []
        while case .bytes(let count) = try scratch.withUnsafeMutableBytes({ try pair.server.read(into: $0) }) {
            #expect(count <= 5)
            received += scratch[..<count]
        }
        #expect(received == message)
        #expect(pair.server.bufferedInboundByteCount == 0)
        #expect(pair.client.takeOutbound() == nil)
    }

    /// A large outbound buffer the channel has released is filled again instead of a fresh
    /// allocation; one still held elsewhere is not touched; small traffic drops them all, but
    /// not the one small frame a large message ends with.
    @Test func releasedOutboundBuffersAreReusedAndSmallTrafficDropsThem() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        func address(_ buffer: ByteBuffer) -> UnsafeRawPointer? { buffer.withUnsafeReadableBytes { $0.baseAddress } }
        let big = ByteBuffer(repeating: 1, count: 60_000)

        try pair.client.write(big)
        var first = pair.client.takeOutbound()
        #expect(first != nil)
        let firstAddress = address(first!)
        // Still held (as if the channel had not written it yet): a fresh buffer is used.
        try pair.client.write(big)
        let second = try #require(pair.client.takeOutbound())
        #expect(address(second) != firstAddress)
        pair.server.receive(first!)
        pair.server.receive(second)
        #expect(try pair.read(pair.server) == [UInt8](repeating: 1, count: 120_000))
        first = nil  // the channel and the peer are done with it
        try pair.client.write(big)
        let third = try #require(pair.client.takeOutbound())
        #expect(address(third) == firstAddress)
        pair.server.receive(third)
        #expect(try pair.read(pair.server) == [UInt8](repeating: 1, count: 60_000))
        #expect(pair.client.recycledOutboundBufferCount == 2)

        // A message's small last frame, then its next large one: the buffers stay.
        try pair.client.write(ByteBuffer(repeating: 1, count: 192))
        _ = pair.client.takeOutbound()
        #expect(pair.client.recycledOutboundBufferCount == 2)
        try pair.client.write(big)
        _ = pair.client.takeOutbound()
        #expect(pair.client.recycledOutboundBufferCount == 3)
        // Two small writes in a row: traffic has turned small.
        try pair.client.write(ByteBuffer(string: "ping"))
        _ = pair.client.takeOutbound()
        #expect(pair.client.recycledOutboundBufferCount == 3)
        try pair.client.write(ByteBuffer(string: "ping"))
        #expect(pair.client.recycledOutboundBufferCount == 0)
    }

    @Test func ciphertextNeverContainsThePlaintext() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        let secret = ByteBuffer(string: String(repeating: "attack at dawn ", count: 100))
        try pair.client.write(secret)
        let wire = try #require(pair.client.takeOutbound())
        #expect(!Array(wire.readableBytesView).contains(subsequence: Array("attack at dawn".utf8)))
        pair.server.receive(wire)
        #expect(try pair.read(pair.server) == Array(secret.readableBytesView))
    }

    @Test func exporterGivesBothSidesTheSameKeyPerLabelAndContext() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        let label = "MPCP datagram v1 dialer-to-listener"
        let clientKey = try pair.client.exportKeyingMaterial(label: label, context: [0, 0, 0, 0], length: 32)
        let serverKey = try pair.server.exportKeyingMaterial(label: label, context: [0, 0, 0, 0], length: 32)
        #expect(clientKey.count == 32)
        #expect(clientKey.constantTimeEquals(serverKey))
        let nextEpoch = try pair.client.exportKeyingMaterial(label: label, context: [0, 0, 0, 1], length: 32)
        let otherDirection = try pair.client.exportKeyingMaterial(label: "MPCP datagram v1 listener-to-dialer", context: [0, 0, 0, 0], length: 32)
        #expect(!clientKey.constantTimeEquals(nextEpoch))
        #expect(!clientKey.constantTimeEquals(otherDirection))
    }

    /// The library's layer: OpenSSL's answers each request itself (TLSRecordLayerModeTests).
    @Test func keyUpdatesHappenAtTheInjectedLimitWhileDataFlows() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordsPerKeyUpdate: 3, recordLayer: .forced(.library))
        try pair.handshake()
        var expected: [UInt8] = []
        var received: [UInt8] = []
        for round in 0..<20 {
            let chunk = ByteBuffer(repeating: UInt8(round), count: 20_000)  // two records each
            expected += Array(chunk.readableBytesView)
            try pair.client.write(chunk)
            pair.pump()
            received += try pair.read(pair.server)
            // The server answers, so it sends the KeyUpdate the client requested.
            try pair.server.write(ByteBuffer(string: "ack"))
            pair.pump()
            _ = try pair.read(pair.client)
        }
        #expect(received == expected)
        // Client: 40 records at 3 per key, a KeyUpdate before records 4, 7, ... 40.
        #expect(pair.client.keyUpdatesInitiated == 13)
        #expect(pair.server.keyUpdatesReceived == 13)
        // Each request is answered ahead of the server's next record, and the answer renews its
        // key, so its one record per round never reaches the limit under one key.
        #expect(pair.server.keyUpdatesSent == 13)
        #expect(pair.server.keyUpdatesInitiated == 0)
        #expect(pair.client.keyUpdatesReceived == 13)
        #expect(pair.client.keyUpdatesSent == 13)

        // Alone, the server reaches its limit: one ack under the key it has, then 10 records
        // need KeyUpdates before the 3rd, 6th and 9th. The client reads all three requests
        // before it writes again, so one answer covers them (RFC 8446 §4.6.3).
        var acks: [UInt8] = []
        for index in 0..<10 { try pair.server.write(ByteBuffer(bytes: [UInt8(index)])) }
        pair.pump()
        acks = try pair.read(pair.client)
        pair.pump()
        #expect(acks == Array(0..<10))
        #expect(pair.server.keyUpdatesInitiated == 3)
        #expect(pair.client.keyUpdatesReceived == 16)
        #expect(pair.client.keyUpdatesSent == 13)  // nothing is written while reading
        try pair.client.write(ByteBuffer(string: "after"))
        pair.pump()
        #expect(try pair.read(pair.server) == Array("after".utf8))
        #expect(pair.client.keyUpdatesSent == 14)
        #expect(pair.server.keyUpdatesReceived == 14)
    }

    /// A write after close is refused at once, even one that would only be held: it would never
    /// be sent.
    @Test func writesAfterCloseAreRefusedEvenWhenTheyWouldBeHeld() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        pair.client.close()
        #expect(throws: SecurityError.self) {
            try pair.client.write(head: ByteBuffer(string: "late"), body: ByteBuffer(), coalescing: true)
        }
        #expect(pair.client.heldByteCount == 0)
    }

    @Test func garbageFailsTheHandshakeWithATypedError() throws {
        let server = try TLSEngine(context: TLSContext(identity: nil), role: .server)
        server.receive(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        do {
            _ = try server.advanceHandshake()
            Issue.record("garbage accepted")
        } catch {
            #expect(error.code == .tlsHandshakeFailed)
        }
    }

    @Test func writingBeforeTheHandshakeIsRefused() throws {
        let client = try TLSEngine(context: TLSContext(identity: nil), role: .client)
        #expect(throws: SecurityError.self) { try client.write(ByteBuffer(string: "early")) }
        #expect(throws: SecurityError.self) { try client.exportKeyingMaterial(label: "x", context: [], length: 32) }
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard subsequence.count <= count else { return false }
        return (0...(count - subsequence.count)).contains { start in self[start..<start + subsequence.count].elementsEqual(subsequence) }
    }
}
