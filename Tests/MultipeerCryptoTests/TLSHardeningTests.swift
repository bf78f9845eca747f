import CMultipeerOpenSSL
import CMultipeerShims
import Foundation
@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Testing

/// A plain OpenSSL endpoint configured the way an attacker likes (any group, weak keys), wired
/// to a TLSEngine through memory BIOs.
final class RawTLSPeer {
    enum State: Equatable { case inProgress, complete, failed }

    let ssl: OpaquePointer
    private let context: OpaquePointer
    /// Ciphertext for the SSL to read.
    private let incoming: OpaquePointer
    /// Ciphertext the SSL wrote.
    private let outgoing: OpaquePointer

    init(
        role: TLSEngine.Role, groups: String? = nil, certificate: Certificate? = nil, key: OpaquePointer? = nil,
        cipherSuite: String? = nil, tickets: Int = 0
    ) throws {
        context = try #require(SSL_CTX_new(TLS_method()))
        // Level 0, so that this side can offer what the library must refuse.
        SSL_CTX_set_security_level(context, 0)
        try #require(mp_SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION) == 1)
        try #require(SSL_CTX_set_num_tickets(context, tickets) == 1)
        if let cipherSuite { try #require(SSL_CTX_set_ciphersuites(context, cipherSuite) == 1) }
        if let groups { try #require(mp_SSL_CTX_set1_groups_list(context, groups) == 1, "groups \(groups)") }
        if let certificate, let key {
            try #require(SSL_CTX_use_certificate(context, certificate.x509) == 1)
            try #require(SSL_CTX_use_PrivateKey(context, key) == 1)
        }
        if role == .server { SSL_CTX_set_alpn_select_cb(context, rawSelectALPN, nil) }
        ssl = try #require(SSL_new(context))
        incoming = try #require(BIO_new(BIO_s_mem()))
        outgoing = try #require(BIO_new(BIO_s_mem()))
        SSL_set_bio(ssl, incoming, outgoing)
        switch role {
        case .client:
            SSL_set_connect_state(ssl)
            try #require(SSL_set_alpn_protos(ssl, TLSContext.alpnWire, UInt32(TLSContext.alpnWire.count)) == 0)
        case .server:
            SSL_set_accept_state(ssl)
        }
    }

    deinit {
        SSL_free(ssl)
        SSL_CTX_free(context)
    }

    func step() -> State {
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .complete }
        let error = SSL_get_error(ssl, result)
        ERR_clear_error()
        return error == SSL_ERROR_WANT_READ ? .inProgress : .failed
    }

    func receive(_ bytes: ByteBuffer) {
        _ = bytes.withUnsafeReadableBytes { BIO_write(incoming, $0.baseAddress, Int32($0.count)) }
    }

    func takeOutbound() -> ByteBuffer? {
        let pending = BIO_ctrl_pending(outgoing)
        guard pending > 0 else { return nil }
        var buffer = ByteBuffer()
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: pending) { Int(max(0, BIO_read(outgoing, $0.baseAddress, Int32(pending)))) }
        return buffer
    }

    /// Writes application data (OpenSSL's own record layer), and any KeyUpdate it owes first.
    func write(_ bytes: [UInt8]) throws {
        var written = 0
        if bytes.isEmpty { return }
        try #require(SSL_write_ex(ssl, bytes, bytes.count, &written) == 1 && written == bytes.count)
    }

    /// Reads all application data that has arrived; nil once the peer closed.
    func read() throws -> [UInt8]? {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            var count = 0
            if SSL_read_ex(ssl, &chunk, chunk.count, &count) == 1 {
                received += chunk[..<count]
                continue
            }
            let error = SSL_get_error(ssl, 0)
            ERR_clear_error()
            if error == SSL_ERROR_ZERO_RETURN { return received.isEmpty ? nil : received }
            try #require(error == SSL_ERROR_WANT_READ, "SSL_read failed: \(error)")
            return received
        }
    }

    /// The NID of the key exchange group used.
    var negotiatedGroup: Int32 { mp_SSL_get_negotiated_group(ssl) }

    /// Runs both handshakes until each has finished or one has failed.
    func handshake(with engine: TLSEngine) -> (engineError: SecurityError?, raw: State) {
        var raw = State.inProgress
        for _ in 0..<10 {
            raw = step()
            if let bytes = takeOutbound() { engine.receive(bytes) }
            let engineDone: Bool
            do {
                engineDone = try engine.advanceHandshake() == .complete
            } catch {
                // Let this side read the alert.
                if let bytes = engine.takeOutbound() { receive(bytes) }
                if raw == .inProgress { raw = step() }
                return (error, raw)
            }
            if let bytes = engine.takeOutbound() { receive(bytes) }
            if raw == .failed { return (nil, raw) }
            if engineDone && raw == .complete { return (nil, raw) }
        }
        return (nil, raw)
    }
}

private func rawSelectALPN(
    _ ssl: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, _ outLength: UnsafeMutablePointer<UInt8>?,
    _ offered: UnsafePointer<UInt8>?, _ offeredLength: UInt32, _ argument: UnsafeMutableRawPointer?
) -> Int32 {
    // Selects the first protocol offered, whatever it is: the engine checks the answer.
    guard let offered, let out, let outLength, offeredLength > 0, Int(offered[0]) < Int(offeredLength) else {
        return SSL_TLSEXT_ERR_ALERT_FATAL
    }
    out.pointee = offered + 1
    outLength.pointee = offered[0]
    return SSL_TLSEXT_ERR_OK
}

/// Certificates and keys the library refuses to make (RSA-1024, CA-marked peers), issued with the
/// openssl command line in a temporary directory.
final class CommandLinePKI: Sendable {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("mpc-weak-pki-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try """
            [peer]
            basicConstraints = critical,CA:FALSE
            keyUsage = critical,digitalSignature
            extendedKeyUsage = clientAuth,serverAuth
            [capeer]
            basicConstraints = critical,CA:TRUE
            keyUsage = critical,digitalSignature,keyCertSign
            extendedKeyUsage = clientAuth,serverAuth
            [capeer_nosign]
            basicConstraints = critical,CA:TRUE
            keyUsage = critical,digitalSignature
            extendedKeyUsage = clientAuth,serverAuth
            [ca]
            basicConstraints = critical,CA:TRUE
            keyUsage = critical,keyCertSign,cRLSign,digitalSignature

            """.write(to: file("extensions.cnf"), atomically: true, encoding: .utf8)
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    private func file(_ name: String) -> URL { directory.appendingPathComponent(name) }

    private func run(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "openssl \(arguments.joined(separator: " ")): \(text)")
    }

    /// Writes an issuer made by the library, so the command line can sign with it.
    func add(_ name: String, certificate: Certificate, key: PrivateKey) throws {
        try certificate.pemEncoded.write(to: file("\(name).pem"), atomically: true, encoding: .utf8)
        try key.pemEncoded().write(to: file("\(name).key"), atomically: true, encoding: .utf8)
    }

    /// Issues `name` for a fresh key (`newKey` as `openssl req -newkey` takes it) under the issuer
    /// `issuer`, with the extension section `extensions` and the subject `subject` (`-subj` form,
    /// multi-valued RDNs allowed; `/CN=name` by default). Returns the certificate and the raw key.
    @discardableResult
    func issue(
        _ name: String, newKey: String, extensions: String, issuer: String, subject: String? = nil
    ) throws -> (certificate: Certificate, keyPEM: String) {
        try run([
            "req", "-new", "-newkey", newKey, "-nodes", "-keyout", "\(name).key", "-subj", subject ?? "/CN=\(name)",
            "-out", "\(name).csr",
        ])
        try run([
            "x509", "-req", "-in", "\(name).csr", "-CA", "\(issuer).pem", "-CAkey", "\(issuer).key", "-set_serial", "0x\(UInt32.random(in: 1...UInt32.max))",
            "-days", "2", "-extfile", "extensions.cnf", "-extensions", extensions, "-out", "\(name).pem",
        ])
        let certificate = try Certificate(pemEncoded: String(decoding: try Data(contentsOf: file("\(name).pem")), as: UTF8.self))
        return (certificate, String(decoding: try Data(contentsOf: file("\(name).key")), as: UTF8.self))
    }

    /// A key PEM as a bare EVP_PKEY, bypassing PrivateKey's refusal of weak keys. The caller frees it.
    static func rawKey(_ pem: String) throws -> OpaquePointer {
        try #require(OpenSSLBIO.withReadBIO(Array(pem.utf8)) { PEM_read_bio_PrivateKey($0, nil, nil, nil) })
    }
}

@Suite("TLS key exchange groups")
struct TLSGroupTests {
    /// Finite-field groups cost the listener a large modular exponentiation per ClientHello
    /// (~117 ms CPU for ffdhe8192); the server refuses them, and every other group but X25519 and
    /// P-256, on the ClientHello alone.
    @Test(arguments: ["ffdhe8192", "ffdhe2048", "P-384", "X448"])
    func serverRefusesOtherGroupsAtOnce(group: String) throws {
        let attacker = try RawTLSPeer(role: .client, groups: group)
        let server = try TLSEngine(context: TLSContext(identity: nil), role: .server)
        #expect(attacker.step() == .inProgress)
        server.receive(try #require(attacker.takeOutbound()))
        // Refused on the ClientHello alone: no key share was computed.
        do {
            _ = try server.advanceHandshake()
            Issue.record("the server went on with a ClientHello offering only \(group)")
        } catch {
            #expect(error.code == .tlsHandshakeFailed)
        }
        if let alert = server.takeOutbound() { attacker.receive(alert) }
        #expect(attacker.step() == .failed)
    }

    @Test func clientRefusesAServerThatOnlySpeaksOtherGroups() throws {
        for group in ["ffdhe2048", "P-384"] {
            let identity = try SecurityIdentity.ephemeral()
            let server = try RawTLSPeer(role: .server, groups: group, certificate: identity.certificate, key: identity.privateKey.pkey)
            let client = try TLSEngine(context: TLSContext(identity: nil), role: .client)
            let outcome = server.handshake(with: client)
            #expect(outcome.engineError?.code == .tlsHandshakeFailed, "\(group)")
            #expect(outcome.raw == .failed, "\(group)")
        }
    }

    @Test(arguments: [("X25519", NID_X25519), ("P-256", NID_X9_62_prime256v1)])
    func x25519AndP256WorkBothWays(group: String, nid: Int32) throws {
        let peer = try TestPKI().peer("alice")
        let client = try RawTLSPeer(role: .client, groups: group)
        let server = try TLSEngine(context: TLSContext(identity: peer), role: .server)
        let toServer = client.handshake(with: server)
        #expect(toServer.engineError == nil)
        #expect(toServer.raw == .complete)
        #expect(client.negotiatedGroup == nid)

        let identity = try SecurityIdentity.ephemeral()
        let rawServer = try RawTLSPeer(role: .server, groups: group, certificate: identity.certificate, key: identity.privateKey.pkey)
        let engineClient = try TLSEngine(context: TLSContext(identity: peer), role: .client)
        let toClient = rawServer.handshake(with: engineClient)
        #expect(toClient.engineError == nil)
        #expect(toClient.raw == .complete)
        #expect(rawServer.negotiatedGroup == nid)
    }
}

@Suite("Weak peer keys in the TLS handshake")
struct WeakPeerKeyTests {
    let pki: CommandLinePKI
    init() throws {
        pki = try CommandLinePKI()
        let rootKey = try PrivateKey.generate()
        let root = try CertificateBuilder(commonName: "Weak Test Root", role: .certificateAuthority(pathLength: nil)).issue(for: rootKey)
        try pki.add("root", certificate: root, key: rootKey)
    }

    private func identity(_ newKey: String) throws -> (certificate: Certificate, key: OpaquePointer) {
        let issued = try pki.issue("leaf", newKey: newKey, extensions: "peer", issuer: "root")
        return (issued.certificate, try CommandLinePKI.rawKey(issued.keyPEM))
    }

    @Test func aClientPresentingRSA1024IsRefused() throws {
        let weak = try identity("rsa:1024")
        defer { EVP_PKEY_free(weak.key) }
        let client = try RawTLSPeer(role: .client, certificate: weak.certificate, key: weak.key)
        let server = try TLSEngine(context: TLSContext(identity: nil), role: .server)
        #expect(client.handshake(with: server).engineError?.code == .tlsHandshakeFailed)
        #expect(!server.isHandshakeComplete)
    }

    @Test func aServerPresentingRSA1024IsRefused() throws {
        let weak = try identity("rsa:1024")
        defer { EVP_PKEY_free(weak.key) }
        let server = try RawTLSPeer(role: .server, certificate: weak.certificate, key: weak.key)
        let client = try TLSEngine(context: TLSContext(identity: nil), role: .client)
        #expect(server.handshake(with: client).engineError?.code == .tlsHandshakeFailed)
        #expect(!client.isHandshakeComplete)
    }

    /// The same harness with an RSA-2048 key succeeds, so the refusals above are about the key.
    @Test func rsa2048FromTheSameRootIsAccepted() throws {
        let strong = try identity("rsa:2048")
        defer { EVP_PKEY_free(strong.key) }
        let client = try RawTLSPeer(role: .client, certificate: strong.certificate, key: strong.key)
        let server = try TLSEngine(context: TLSContext(identity: nil), role: .server)
        let outcome = client.handshake(with: server)
        #expect(outcome.engineError == nil)
        #expect(server.isHandshakeComplete)
        #expect(server.peerCertificateChain.first == strong.certificate)

        let rawServer = try RawTLSPeer(role: .server, certificate: strong.certificate, key: strong.key)
        let engineClient = try TLSEngine(context: TLSContext(identity: nil), role: .client)
        #expect(rawServer.handshake(with: engineClient).engineError == nil)
        #expect(engineClient.isHandshakeComplete)
    }

    @Test func contextsRunAtSecurityLevelTwo() throws {
        let context = try TLSContext(identity: nil)
        #expect(SSL_CTX_get_security_level(context.server) == 2)
        #expect(SSL_CTX_get_security_level(context.client) == 2)
    }
}

@Suite("Stale OpenSSL errors on the calling thread")
struct StaleOpenSSLErrorTests {
    /// Leaves a real error on this thread's queue, as other code that does not clear it would.
    private func leaveStaleError() {
        let garbage: [UInt8] = [0x30, 0x03, 0x02, 0x01]
        garbage.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = d2i_X509(nil, &cursor, buffer.count)
        }
        #expect(ERR_peek_error() != 0)
    }

    /// Runs `body` with a stale error queued and records any throw as this step's failure.
    private func withStaleError<T: Equatable>(_ step: String, expecting expected: T, _ body: () throws -> T) {
        leaveStaleError()
        do {
            #expect(try body() == expected, "\(step)")
        } catch {
            Issue.record("\(step): \(error)")
        }
    }

    @Test func readsWritesAndCloseIgnoreAnotherCallersError() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordsPerKeyUpdate: 1)
        withStaleError("handshake", expecting: true) { try pair.handshake(); return pair.server.isHandshakeComplete }
        var scratch = [UInt8](repeating: 0, count: 64)
        withStaleError("read with nothing waiting", expecting: .wouldBlock) { try scratch.withUnsafeMutableBytes { try pair.server.read(into: $0) } }
        withStaleError("readPlaintext with nothing waiting", expecting: .plaintext(ByteBuffer())) { try pair.server.readPlaintext() }
        for message in ["hello", "again"] {  // the second write starts with a KeyUpdate
            withStaleError("write \(message)", expecting: true) {
                try pair.client.write(ByteBuffer(string: message))
                pair.pump()
                return true
            }
            withStaleError("read \(message)", expecting: Array(message.utf8)) { try pair.read(pair.server) }
        }
        pair.client.close()
        pair.pump()
        withStaleError("read close_notify", expecting: .closed) { try pair.server.readPlaintext() }
    }
}

/// docs/PROTOCOL.md §5: no resumption, so every handshake carries the certificates the trust
/// step judges.
@Suite("TLS session resumption")
struct TLSResumptionTests {
    @Test func theServerIssuesNothingAClientCouldResumeWith() throws {
        let identity = try SecurityIdentity.ephemeral()
        let server = try TLSEngine(context: TLSContext(identity: identity), role: .server)
        let client = try RawTLSPeer(role: .client)
        let outcome = client.handshake(with: server)
        #expect(outcome.engineError == nil && outcome.raw == .complete)
        // Post-handshake messages (where a NewSessionTicket would travel) reach the client.
        if let bytes = server.takeOutbound() { client.receive(bytes) }
        var byte: UInt8 = 0
        var read = 0
        _ = SSL_read_ex(client.ssl, &byte, 1, &read)
        ERR_clear_error()
        let session = try #require(SSL_get_session(client.ssl))
        #expect(SSL_SESSION_is_resumable(session) == 0)
    }
}
