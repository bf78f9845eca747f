import CMultipeerOpenSSL
@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Testing

/// The engine's record layer against OpenSSL's own, in both roles and every suite: the key
/// schedule, KeyUpdate both ways, session tickets and close_notify must agree byte for byte.
/// The engines here use the library's layer whatever MULTIPEER_TLS_RECORD_LAYER says.
@Suite("TLS records: the engine's own layer against OpenSSL's")
struct TLSRecordInteropTests {
    static let suites = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]

    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    /// An engine and an OpenSSL endpoint with finished handshakes.
    private func connect(engineRole: TLSEngine.Role, suite: String, tickets: Int = 0, recordsPerKeyUpdate: UInt64 = 1 << 24) throws -> (TLSEngine, RawTLSPeer) {
        let engine = try TLSEngine(
            context: TLSContext(identity: nil), role: engineRole, recordsPerKeyUpdate: recordsPerKeyUpdate, recordLayer: .forced(.library))
        let raw: RawTLSPeer
        if engineRole == .client {
            let bob = try pki.peer("bob")
            raw = try RawTLSPeer(role: .server, certificate: bob.certificate, key: bob.privateKey.pkey, cipherSuite: suite, tickets: tickets)
        } else {
            raw = try RawTLSPeer(role: .client, cipherSuite: suite)
        }
        let outcome = raw.handshake(with: engine)
        #expect(outcome.engineError == nil)
        try #require(outcome.raw == .complete && engine.isHandshakeComplete)
        #expect(engine.negotiatedCipherSuite == suite)
        return (engine, raw)
    }

    private func engineSends(_ bytes: [UInt8], from engine: TLSEngine, to raw: RawTLSPeer) throws -> [UInt8]? {
        try engine.write(ByteBuffer(bytes: bytes))
        if let wire = engine.takeOutbound() { raw.receive(wire) }
        return try raw.read()
    }

    private func rawSends(_ bytes: [UInt8], from raw: RawTLSPeer, to engine: TLSEngine) throws -> TLSEngine.ReadResult {
        try raw.write(bytes)
        if let wire = raw.takeOutbound() { engine.receive(wire) }
        return try engine.readPlaintext()
    }

    private static func payload(_ count: Int, seed: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) }
    }

    @Test(arguments: suites, [TLSEngine.Role.client, .server])
    func dataKeyUpdatesAndCloseAgreeWithOpenSSL(suite: String, engineRole: TLSEngine.Role) throws {
        let (engine, raw) = try connect(engineRole: engineRole, suite: suite, recordsPerKeyUpdate: 2)
        for (round, size) in [1, 16_384, 16_385, 100_000].enumerated() {
            // The engine's KeyUpdates (every 2 records) are read by OpenSSL...
            let outbound = Self.payload(size, seed: round)
            #expect(try engineSends(outbound, from: engine, to: raw) == outbound)
            // ...which answers them before its own data, as the engine reads.
            let inbound = Self.payload(size, seed: round + 100)
            #expect(try rawSends(inbound, from: raw, to: engine) == .plaintext(ByteBuffer(bytes: inbound)))
        }
        #expect(engine.keyUpdatesInitiated == 5)  // before records 3, 5, 7, 9 and 11 of 1 + 1 + 2 + 7
        #expect(engine.keyUpdatesReceived >= 1)

        // OpenSSL's own requested KeyUpdate: the engine answers, and both keep talking.
        let answeredBefore = engine.keyUpdatesSent
        #expect(SSL_key_update(raw.ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
        #expect(try rawSends([7], from: raw, to: engine) == .plaintext(ByteBuffer(bytes: [7])))
        #expect(engine.keyUpdatesSent == answeredBefore)  // answered ahead of its next record
        #expect(try engineSends([8], from: engine, to: raw) == [8])
        #expect(engine.keyUpdatesSent == answeredBefore + 1)

        // close_notify from the engine ends OpenSSL's reading...
        engine.close()
        if let wire = engine.takeOutbound() { raw.receive(wire) }
        #expect(try raw.read() == nil)
        // ...and OpenSSL's ends the engine's.
        _ = SSL_shutdown(raw.ssl)
        if let wire = raw.takeOutbound() { engine.receive(wire) }
        #expect(try engine.readPlaintext() == .closed)
    }

    @Test(arguments: suites)
    func ticketsFromAServerAreSkipped(suite: String) throws {
        let (engine, raw) = try connect(engineRole: .client, suite: suite, tickets: 2)
        #expect(try rawSends(Array("after tickets".utf8), from: raw, to: engine) == .plaintext(ByteBuffer(string: "after tickets")))
        #expect(try engineSends(Array("reply".utf8), from: engine, to: raw) == Array("reply".utf8))
    }

    @Test func manyOpenSSLKeyUpdatesGetOneAnswer() throws {
        let (engine, raw) = try connect(engineRole: .server, suite: "TLS_AES_128_GCM_SHA256")
        for _ in 0..<TLSRecordLayer.maximumRecordsWithoutData - 1 {
            #expect(SSL_key_update(raw.ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
            #expect(SSL_do_handshake(raw.ssl) == 1)  // sends it now
        }
        #expect(try rawSends([1], from: raw, to: engine) == .plaintext(ByteBuffer(bytes: [1])))
        #expect(engine.keyUpdatesReceived == TLSRecordLayer.maximumRecordsWithoutData - 1)
        #expect(try engineSends([2], from: engine, to: raw) == [2])
        #expect(engine.keyUpdatesSent == 1)
    }

    /// A client may negotiate max_fragment_length (RFC 6066), which OpenSSL's server accepts;
    /// the engine then seals no record larger than it, coalesced frames included.
    @Test(arguments: [(UInt8(1), 512), (2, 1_024), (3, 2_048), (4, 4_096)])
    func aClientsMaxFragmentLengthIsHonoured(mode: UInt8, limit: Int) throws {
        let engine = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(.library))
        let raw = try RawTLSPeer(role: .client, cipherSuite: "TLS_AES_128_GCM_SHA256")
        #expect(SSL_set_tlsext_max_fragment_length(raw.ssl, mode) == 1)
        let outcome = raw.handshake(with: engine)
        try #require(outcome.engineError == nil && outcome.raw == .complete)
        #expect(engine.recordLimit == limit)
        let large = Self.payload(10_000, seed: 3)
        try engine.write(ByteBuffer(bytes: large))
        for index in 0..<20 { try engine.write(head: ByteBuffer(bytes: [UInt8](repeating: UInt8(index), count: 100)), body: ByteBuffer(), coalescing: true) }
        try engine.sealHeld()
        let wire = try #require(engine.takeOutbound())
        let lengths = try #require(TLSRecords.lengths(in: [wire]))
        #expect(lengths.allSatisfy { $0 <= limit + 17 })
        raw.receive(wire)
        #expect(try raw.read() == large + (0..<20).flatMap { [UInt8](repeating: UInt8($0), count: 100) })
    }

    /// The client's first record often arrives in the same read as its Finished: OpenSSL must
    /// not have read it, and the engine must open it under the first application key.
    @Test func dataRightBehindTheClientsFinishedIsRead() throws {
        let client = try TLSEngine(context: TLSContext(identity: nil), role: .client, recordLayer: .forced(.library))
        let server = try TLSEngine(context: TLSContext(identity: nil), role: .server, recordLayer: .forced(.library))
        #expect(try client.advanceHandshake() == .inProgress)
        server.receive(try #require(client.takeOutbound()))
        #expect(try server.advanceHandshake() == .inProgress)
        client.receive(try #require(server.takeOutbound()))
        #expect(try client.advanceHandshake() == .complete)
        try client.write(ByteBuffer(string: "first"))
        server.receive(try #require(client.takeOutbound()))  // Finished and the first record together
        #expect(try server.advanceHandshake() == .complete)
        #expect(try server.readPlaintext() == .plaintext(ByteBuffer(string: "first")))
        try server.write(ByteBuffer(string: "back"))
        client.receive(try #require(server.takeOutbound()))
        #expect(try client.readPlaintext() == .plaintext(ByteBuffer(string: "back")))
    }
}
