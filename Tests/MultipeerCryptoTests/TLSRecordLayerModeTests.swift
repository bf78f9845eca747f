import CMultipeerOpenSSL
@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Testing

/// The engine's two record layers, the library's and OpenSSL's own (the guard's fallback), back
/// to back: the same API and semantics from either, and each speaks to the other.
@Suite("TLS engine: the library's record layer and OpenSSL's")
struct TLSRecordLayerModeTests {
    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    private func pair(_ kind: TLSRecordLayerKind, recordsPerKeyUpdate: UInt64 = 1 << 24) throws -> EnginePair {
        let pair = try EnginePair(
            clientIdentity: nil, serverIdentity: try pki.peer("bob"), recordsPerKeyUpdate: recordsPerKeyUpdate, recordLayer: .forced(kind))
        try pair.handshake()
        try #require(pair.client.recordLayer == kind && pair.server.recordLayer == kind)
        return pair
    }

    private static func payload(_ count: Int, seed: Int) -> ByteBuffer {
        ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) })
    }

    @Test(arguments: TLSRecordLayerKind.allCases)
    func dataBothWaysLargeWritesAndClose(kind: TLSRecordLayerKind) throws {
        let pair = try pair(kind)
        // A frame head and a bulk body, sealed as one stream in records of at most 16 KiB.
        let head = Self.payload(12, seed: 1)
        let body = Self.payload(100_000, seed: 2)
        try pair.client.write(head: head, body: body)
        let wire = try #require(pair.client.takeOutbound())
        let records = (12 + 100_000 + 16_383) / 16_384
        #expect(wire.readableBytes == 12 + 100_000 + records * TLSEngine.recordOverhead)
        #expect(recordLengths(wire).allSatisfy { $0 <= TLSEngine.maximumRecordPlaintext + 17 })
        pair.server.receive(wire)
        #expect(try pair.read(pair.server) == Array(head.readableBytesView) + Array(body.readableBytesView))
        try pair.server.write(ByteBuffer(string: "pong"))
        pair.pump()
        #expect(try pair.read(pair.client) == Array("pong".utf8))

        // close_notify ends the peer's reading, for good; this side can still read (half-close).
        pair.client.close()
        #expect(throws: SecurityError.self) { try pair.client.write(ByteBuffer(string: "late")) }
        pair.pump()
        #expect(try pair.server.readPlaintext() == .closed)
        #expect(try pair.server.readPlaintext() == .closed)
        try pair.server.write(ByteBuffer(string: "last words"))
        pair.server.close()
        pair.pump()
        #expect(try pair.client.readPlaintext() == .plaintext(ByteBuffer(string: "last words")))
        #expect(try pair.client.readPlaintext() == .closed)
    }

    /// The client's first record often arrives in the same read as its Finished.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func dataRightBehindTheClientsFinishedIsRead(kind: TLSRecordLayerKind) throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordLayer: .forced(kind))
        #expect(try pair.client.advanceHandshake() == .inProgress)
        pair.server.receive(try #require(pair.client.takeOutbound()))
        #expect(try pair.server.advanceHandshake() == .inProgress)
        pair.client.receive(try #require(pair.server.takeOutbound()))
        #expect(try pair.client.advanceHandshake() == .complete)
        try pair.client.write(ByteBuffer(string: "first"))
        pair.server.receive(try #require(pair.client.takeOutbound()))
        #expect(try pair.server.advanceHandshake() == .complete)
        #expect(pair.server.recordLayer == kind)
        #expect(try pair.server.readPlaintext() == .plaintext(ByteBuffer(string: "first")))
    }

    @Test(arguments: TLSRecordLayerKind.allCases)
    func readingIntoASmallBufferTakesAsMuchAsFits(kind: TLSRecordLayerKind) throws {
        let pair = try pair(kind)
        let message = Array("the quick brown fox".utf8)
        try pair.client.write(ByteBuffer(bytes: message))
        var wire = try #require(pair.client.takeOutbound())
        pair.server.receive(wire.readSlice(length: 10)!)
        var scratch = [UInt8](repeating: 0, count: 5)
        #expect(try scratch.withUnsafeMutableBytes { try pair.server.read(into: $0) } == .wouldBlock)
        pair.server.receive(wire)
        var received: [UInt8] = []
        while case .bytes(let count) = try scratch.withUnsafeMutableBytes({ try pair.server.read(into: $0) }) {
            #expect(count <= 5)
            received += scratch[..<count]
        }
        #expect(received == message)
    }

    @Test(arguments: TLSRecordLayerKind.allCases)
    func aBurstOfSmallFramesSharesOneRecord(kind: TLSRecordLayerKind) throws {
        let pair = try pair(kind)
        var expected: [UInt8] = []
        for index in 0..<100 {
            let head = Self.payload(12, seed: index)
            let body = Self.payload(64, seed: index + 1_000)
            expected += Array(head.readableBytesView) + Array(body.readableBytesView)
            try pair.client.write(head: head, body: body, coalescing: true)
        }
        #expect(pair.client.takeOutbound() == nil)
        #expect(pair.client.heldByteCount == 100 * 76)
        try pair.client.sealHeld()
        let wire = try #require(pair.client.takeOutbound())
        #expect(recordLengths(wire) == [100 * 76 + 17])
        pair.server.receive(wire)
        #expect(try pair.read(pair.server) == expected)
    }

    /// A record that fails to authenticate ends the connection: a fatal alert to the peer, the
    /// same kind of error, every later read fails, writes are refused, no close_notify follows.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func aTamperedRecordFailsForGood(kind: TLSRecordLayerKind) throws {
        let pair = try pair(kind)
        try pair.client.write(ByteBuffer(string: "hello, tampered"))
        var wire = try #require(pair.client.takeOutbound())
        let index = wire.readerIndex + 8
        wire.setInteger(wire.getInteger(at: index, as: UInt8.self)! ^ 0x01, at: index)
        pair.server.receive(wire)
        let error = try #require(throws: SecurityError.self) { try pair.server.readPlaintext() }
        #expect(error.code == .tlsFailure)
        let alert = try #require(pair.server.takeOutbound())
        #expect(try #require(throws: SecurityError.self) { try pair.server.readPlaintext() }.code == .tlsFailure)
        #expect(throws: SecurityError.self) { try pair.server.write(ByteBuffer(string: "after")) }
        pair.server.close()
        #expect(pair.server.takeOutbound() == nil)
        // The peer learns of it from the alert.
        pair.client.receive(alert)
        #expect(try #require(throws: SecurityError.self) { try pair.client.readPlaintext() }.code == .tlsFailure)
    }

    /// The engine starts a KeyUpdate before `recordsPerKeyUpdate` records under one key, in
    /// either layer (OpenSSL never starts one itself), and the peer's requests are answered.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func keyUpdatesAfterManyRecords(kind: TLSRecordLayerKind) throws {
        let pair = try pair(kind, recordsPerKeyUpdate: 4)
        var expected: [UInt8] = []
        for round in 0..<10 {
            let chunk = Self.payload(20_000, seed: round)  // two records each
            expected += Array(chunk.readableBytesView)
            try pair.client.write(chunk)
        }
        pair.pump()
        #expect(try pair.read(pair.server) == expected)
        // 20 records at 4 per key: KeyUpdates before records 5, 9, 13 and 17.
        #expect(pair.client.keyUpdatesInitiated == 4)
        #expect(pair.server.keyUpdatesReceived == 4)
        try pair.server.write(ByteBuffer(string: "ack"))
        pair.pump()
        #expect(try pair.read(pair.client) == Array("ack".utf8))
        #expect(pair.server.keyUpdatesSent >= 1)
        #expect(pair.client.keyUpdatesReceived == pair.server.keyUpdatesSent)
        #expect(pair.server.keyUpdatesInitiated == 0)
        try pair.client.write(ByteBuffer(string: "still talking"))
        pair.pump()
        #expect(try pair.read(pair.server) == Array("still talking".utf8))
    }

    /// KeyUpdates in a row without application data cost a key derivation each and yield
    /// nothing: past the limit they end the connection, in either layer.
    @Test(arguments: TLSRecordLayerKind.allCases, [TLSRecordLayer.maximumRecordsWithoutData, TLSRecordLayer.maximumRecordsWithoutData + 1])
    func keyUpdatesWithoutDataAreCutOffPastTheLimit(kind: TLSRecordLayerKind, count: Int) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(kind))
        let raw = try RawTLSPeer(role: .client, cipherSuite: "TLS_AES_128_GCM_SHA256")
        try #require(raw.handshake(with: engine).raw == .complete)
        for _ in 0..<count {
            #expect(SSL_key_update(raw.ssl, SSL_KEY_UPDATE_NOT_REQUESTED) == 1)
            #expect(SSL_do_handshake(raw.ssl) == 1)  // sends it now
        }
        try raw.write([1])
        engine.receive(try #require(raw.takeOutbound()))
        if count <= TLSRecordLayer.maximumRecordsWithoutData {
            #expect(try engine.readPlaintext() == .plaintext(ByteBuffer(bytes: [1])))
        } else {
            let error = try #require(throws: SecurityError.self) { try engine.readPlaintext() }
            #expect(error.code == .tlsFailure)
            #expect(error.reason.contains("in a row without application data"))
        }
    }

    /// A flood of KeyUpdate requests in one socket read: each layer stops at the limit, having
    /// derived and answered no more than that many keys (OpenSSL's would otherwise go through
    /// every record of the read in one call).
    @Test(arguments: TLSRecordLayerKind.allCases)
    func aFloodOfKeyUpdatesInOneReadStopsAtTheLimit(kind: TLSRecordLayerKind) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(kind))
        let raw = try RawTLSPeer(role: .client, cipherSuite: "TLS_AES_128_GCM_SHA256")
        try #require(raw.handshake(with: engine).raw == .complete)
        for _ in 0..<1_000 {
            #expect(SSL_key_update(raw.ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
            #expect(SSL_do_handshake(raw.ssl) == 1)
        }
        try raw.write([1])
        engine.receive(try #require(raw.takeOutbound()))
        let error = try #require(throws: SecurityError.self) { try engine.readPlaintext() }
        #expect(error.code == .tlsFailure)
        let limit = TLSRecordLayer.maximumRecordsWithoutData + 1
        #expect(engine.keyUpdatesReceived <= limit)
        #expect(engine.keyUpdatesSent <= limit)
        #expect(engine.outboundByteCount < limit * 64)
    }

    /// Session tickets cost a copy and a derivation each and yield nothing: a server that sends
    /// them without end is cut off like KeyUpdates, in either layer.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func aFloodOfSessionTicketsIsCutOff(kind: TLSRecordLayerKind) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .client, recordLayer: .forced(kind))
        let identity = try SecurityIdentity.ephemeral()
        let raw = try RawTLSPeer(
            role: .server, certificate: identity.certificate, key: identity.privateKey.pkey, cipherSuite: "TLS_AES_128_GCM_SHA256")
        let outcome = raw.handshake(with: engine)
        try #require(outcome.raw == .complete && outcome.engineError == nil)
        for _ in 0..<(TLSRecordLayer.maximumRecordsWithoutData + 8) {
            #expect(SSL_new_session_ticket(raw.ssl) == 1)
            #expect(SSL_do_handshake(raw.ssl) == 1)  // sends it now
        }
        try raw.write([1])
        engine.receive(try #require(raw.takeOutbound()))
        let error = try #require(throws: SecurityError.self) { try engine.readPlaintext() }
        #expect(error.code == .tlsFailure)
    }

    /// A peer that asks for KeyUpdates but never reads cannot make this side queue answers
    /// without end: the library's layer owes it one answer, sent ahead of its next record;
    /// OpenSSL's answers each request, so past the limit of requests while this side writes
    /// nothing the connection ends.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func keyUpdateRequestsWithoutAWriteAreBounded(kind: TLSRecordLayerKind) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(kind))
        let raw = try RawTLSPeer(role: .client, cipherSuite: "TLS_AES_128_GCM_SHA256")
        try #require(raw.handshake(with: engine).raw == .complete)
        var failure: SecurityError?
        var rounds = 0
        while rounds < 2 * TLSRecordLayer.maximumRecordsWithoutData, failure == nil {
            rounds += 1
            #expect(SSL_key_update(raw.ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
            try raw.write([UInt8(truncatingIfNeeded: rounds)])
            engine.receive(try #require(raw.takeOutbound()))
            do {
                #expect(try engine.readPlaintext() == .plaintext(ByteBuffer(bytes: [UInt8(truncatingIfNeeded: rounds)])))
            } catch {
                failure = error
            }
        }
        switch kind {
        case .library:
            #expect(failure == nil)
            #expect(engine.keyUpdatesSent == 0)
            try engine.write(ByteBuffer(string: "answer"))
            #expect(engine.keyUpdatesSent == 1)
        case .openSSL:
            #expect(rounds == TLSRecordLayer.maximumRecordsWithoutData + 1)
            #expect(failure?.reason.contains("KeyUpdate requests while this side wrote nothing") == true)
        }
    }

    /// A client's max_fragment_length (RFC 6066) bounds every record, in either layer.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func aClientsMaxFragmentLengthIsHonoured(kind: TLSRecordLayerKind) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(kind))
        let raw = try RawTLSPeer(role: .client, cipherSuite: "TLS_AES_128_GCM_SHA256")
        #expect(SSL_set_tlsext_max_fragment_length(raw.ssl, 1) == 1)  // 512 bytes
        let outcome = raw.handshake(with: engine)
        try #require(outcome.engineError == nil && outcome.raw == .complete)
        #expect(engine.recordLayer == kind)
        #expect(engine.recordLimit == 512)
        let large = Array(Self.payload(5_000, seed: 9).readableBytesView)
        try engine.write(ByteBuffer(bytes: large))
        for index in 0..<20 { try engine.write(head: ByteBuffer(repeating: UInt8(index), count: 100), body: ByteBuffer(), coalescing: true) }
        try engine.sealHeld()
        let wire = try #require(engine.takeOutbound())
        #expect(recordLengths(wire).allSatisfy { $0 <= 512 + 17 })
        raw.receive(wire)
        #expect(try raw.read() == large + (0..<20).flatMap { [UInt8](repeating: UInt8($0), count: 100) })
    }

    /// The wire is the same: an engine on either layer talks to one on the other, KeyUpdates
    /// and close included, and both export the same keys.
    @Test(arguments: TLSRecordLayerKind.allCases)
    func eitherLayerTalksToTheOther(clientKind: TLSRecordLayerKind) throws {
        let serverKind: TLSRecordLayerKind = clientKind == .library ? .openSSL : .library
        let pair = try EnginePair(
            clientIdentity: nil, serverIdentity: nil, recordsPerKeyUpdate: 3, recordLayer: .forced(clientKind),
            serverRecordLayer: .forced(serverKind))
        try pair.handshake()
        #expect(pair.client.recordLayer == clientKind && pair.server.recordLayer == serverKind)
        for round in 0..<5 {
            let up = Self.payload(60_000, seed: round)
            try pair.client.write(up)
            pair.pump()
            #expect(try pair.read(pair.server) == Array(up.readableBytesView))
            let down = Self.payload(60_000, seed: round + 50)  // four records: past the limit even after an answer
            try pair.server.write(down)
            pair.pump()
            #expect(try pair.read(pair.client) == Array(down.readableBytesView))
        }
        #expect(pair.client.keyUpdatesInitiated > 0 && pair.server.keyUpdatesInitiated > 0)
        let label = "MPCP datagram v1 dialer-to-listener"
        let clientKey = try pair.client.exportKeyingMaterial(label: label, context: [0, 0, 0, 1], length: 32)
        #expect(clientKey.constantTimeEquals(try pair.server.exportKeyingMaterial(label: label, context: [0, 0, 0, 1], length: 32)))
        pair.server.close()
        pair.pump()
        #expect(try pair.client.readPlaintext() == .closed)
    }
}
