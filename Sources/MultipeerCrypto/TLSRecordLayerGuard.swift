import CMultipeerOpenSSL
import Logging
import NIOCore
import Synchronization

/// Decides, once per process and cipher suite, whether the library's record layer may protect
/// records, or OpenSSL's own must (SECURITY.md, "The TLS record layer").
///
/// `TLSRecordLayer` rests on OpenSSL behaviour it does not own: the key-log callback's line
/// format and timing (both application traffic secrets before the handshake completes), and no
/// record sealed or opened under those secrets before the hand-off (read_ahead off, no
/// tickets). So before the first connection of a suite hands over, the guard checks the linked
/// OpenSSL: a release outside the tested ones is refused outright; otherwise two OpenSSL
/// endpoints run a handshake in memory with a throwaway identity, each record either side's
/// OpenSSL writes (data, KeyUpdate and its answer, close_notify) must be byte for byte what the
/// library seals on the keys the key log gave it, and each must open on the other side: OpenSSL
/// reads the library's records, the library OpenSSL's.
package final class TLSRecordLayerGuard: Sendable {
    /// An OpenSSL release, as the linked library reports it.
    package struct OpenSSLRelease: Sendable, Comparable, CustomStringConvertible {
        package let major: Int
        package let minor: Int
        package let patch: Int

        package init(major: Int, minor: Int, patch: Int = 0) {
            self.major = major
            self.minor = minor
            self.patch = patch
        }

        package static var linked: OpenSSLRelease {
            OpenSSLRelease(major: Int(OPENSSL_version_major()), minor: Int(OPENSSL_version_minor()), patch: Int(OPENSSL_version_patch()))
        }

        package static func < (lhs: OpenSSLRelease, rhs: OpenSSLRelease) -> Bool {
            (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
        }

        package var description: String { "\(major).\(minor).\(patch)" }
    }

    /// The OpenSSL series the library's record layer is tested against, any patch release of
    /// them: Debian 12's 3.0 (scripts/test) and 3.5 (scripts/test-openssl). Not the ones between:
    /// 3.2 rewrote OpenSSL's record layer, and 3.1 to 3.4 have never run here.
    package static let testedOpenSSLSeries = [OpenSSLRelease(major: 3, minor: 0), OpenSSLRelease(major: 3, minor: 5)]

    package static func isTested(_ release: OpenSSLRelease) -> Bool {
        testedOpenSSLSeries.contains(OpenSSLRelease(major: release.major, minor: release.minor))
    }

    package enum Verdict: Sendable, Equatable {
        /// The library's layer agrees with OpenSSL's.
        case agrees
        /// OpenSSL's layer is used instead, for this reason.
        case refused(String)
    }

    /// A difference injected for tests: the guard must see it and refuse.
    package enum Fault: Sendable {
        /// One bit of the client traffic secret flipped on its way from the key log to the
        /// library, as a change in the key-log format might do.
        case alteredTrafficSecret
    }

    /// The process's guard, which every engine asks unless a test gives it another.
    package static let process = TLSRecordLayerGuard()

    private let release: OpenSSLRelease
    private let fault: Fault?

    private struct CheckKey: Hashable {
        let suite: TLSCipherSuite
        let onAnyRelease: Bool
    }

    private struct State {
        var verdicts: [CheckKey: Verdict] = [:]
        var costs: [TLSCipherSuite: Duration] = [:]
        var checksRun = 0
    }
    private let state = Mutex(State())

    /// `release` and `fault` are seams for tests; the process guard uses the linked release.
    package init(release: OpenSSLRelease = .linked, fault: Fault? = nil) {
        self.release = release
        self.fault = fault
    }

    /// The verdict for `suite`, checked on the first call for it and remembered. The first call
    /// logs the outcome: a refusal as a warning with its reason, an agreement at debug level.
    /// `onAnyRelease`: compare even on an untested OpenSSL release (the switch set to `library`).
    package func verdict(for suite: TLSCipherSuite, onAnyRelease: Bool = false, logger: Logger) -> Verdict {
        // The check runs under the lock: a connection of the same suite on another thread
        // waits for it rather than running it again.
        let (verdict, cost) = state.withLock { state -> (Verdict, Duration?) in
            let key = CheckKey(suite: suite, onAnyRelease: onAnyRelease)
            if let known = state.verdicts[key] { return (known, nil) }
            let start = ContinuousClock.now
            let verdict = check(suite, onAnyRelease: onAnyRelease)
            let cost = ContinuousClock.now - start
            state.verdicts[key] = verdict
            state.costs[suite] = cost
            state.checksRun += 1
            return (verdict, cost)
        }
        if let cost {
            let metadata: Logger.Metadata = ["suite": "\(suite.openSSLName)", "openssl": "\(release)", "check": "\(cost)"]
            switch verdict {
            case .agrees:
                logger.debug("TLS records: the library's record layer agrees with OpenSSL's", metadata: metadata)
            case .refused(let why):
                logger.warning(
                    "TLS records: falling back to OpenSSL's record layer", metadata: metadata.merging(["why": "\(why)"]) { $1 })
            }
        }
        return verdict
    }

    /// How many suites have been checked (each once).
    package var checksRun: Int { state.withLock { $0.checksRun } }

    /// What checking `suite` took, once it has been checked.
    package func cost(of suite: TLSCipherSuite) -> Duration? { state.withLock { $0.costs[suite] } }

    private func check(_ suite: TLSCipherSuite, onAnyRelease: Bool) -> Verdict {
        guard onAnyRelease || Self.isTested(release) else {
            let tested = Self.testedOpenSSLSeries.map { "\($0.major).\($0.minor).x" }.joined(separator: ", ")
            return .refused("OpenSSL \(release) is not one of the tested releases (\(tested))")
        }
        do {
            try compareRecordLayers(suite)
            return .agrees
        } catch {
            return .refused(error.reason)
        }
    }

    /// Runs the in-memory handshake and the records of both layers against each other.
    private func compareRecordLayers(_ suite: TLSCipherSuite) throws(Difference) {
        let context: TLSContext
        do {
            context = try TLSContext(identity: nil)  // a throwaway ephemeral identity
        } catch {
            throw Difference("no TLS context for the check: \(error.reason)")
        }
        let client = try MemoryEndpoint(context: context.client, clientSuite: suite.openSSLName)
        let server = try MemoryEndpoint(context: context.server, clientSuite: nil)
        try MemoryEndpoint.handshake(client, server)
        guard let cipher = SSL_get_current_cipher(client.ssl), TLSCipherSuite(protocolID: SSL_CIPHER_get_protocol_id(cipher)) == suite else {
            throw Difference("the handshake did not negotiate \(suite.openSSLName)")
        }
        // Nothing under the application keys yet: no ticket or other record on its way, none read.
        guard client.pendingOutput == 0, server.pendingOutput == 0, client.pendingInput == 0, server.pendingInput == 0,
            SSL_has_pending(client.ssl) == 0, SSL_has_pending(server.ssl) == 0
        else {
            throw Difference("OpenSSL sent or kept records past the end of the handshake")
        }
        guard let clientSecret = client.secrets.client, let serverSecret = client.secrets.server,
            let serverSeesClient = server.secrets.client, let serverSeesServer = server.secrets.server
        else {
            throw Difference("the key log did not give both traffic secrets by the end of the handshake")
        }
        guard clientSecret.constantTimeEquals(serverSeesClient), serverSecret.constantTimeEquals(serverSeesServer) else {
            throw Difference("the two ends' key logs disagree")
        }
        let libraryClientSecret = fault == .alteredTrafficSecret ? Self.flippingOneBit(of: clientSecret) : clientSecret
        let mirrors: (client: TLSRecordLayer, server: TLSRecordLayer)
        do {
            // The client's mirror starts a KeyUpdate before its second record, as OpenSSL's client is told to.
            mirrors = (
                try TLSRecordLayer(
                    suite: suite, role: .client, clientSecret: libraryClientSecret, serverSecret: serverSecret, recordsPerKeyUpdate: 1),
                try TLSRecordLayer(
                    suite: suite, role: .server, clientSecret: libraryClientSecret, serverSecret: serverSecret, recordsPerKeyUpdate: .max)
            )
        } catch {
            throw Difference("the library could not key its record layer: \(error.reason)")
        }
        let exchange = Exchange(client: client, server: server, mirrors: mirrors)
        // A small record, sealed gathered; a larger one, sealed in pieces.
        try exchange.send(Self.probe(100, seed: 1), fromClient: true)
        try exchange.send(Self.probe(2_000, seed: 2), fromClient: false)
        // A KeyUpdate that asks for one back, then the answer ahead of the server's next record.
        guard SSL_key_update(client.ssl, SSL_KEY_UPDATE_REQUESTED) == 1 else { throw Difference("OpenSSL refused a KeyUpdate") }
        try exchange.send(Self.probe(100, seed: 3), fromClient: true)
        try exchange.send(Self.probe(100, seed: 4), fromClient: false)
        try exchange.closeFromClient()
    }

    private static func probe(_ count: Int, seed: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ seed) }
    }

    private static func flippingOneBit(of secret: SecureBytes) -> SecureBytes {
        SecureBytes(count: secret.count) { out in
            secret.withUnsafeBytes { out.copyMemory(from: $0) }
            out[0] ^= 1
        }
    }
}

/// Why the check refused; it never names key material.
private struct Difference: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// What each side's OpenSSL writes, against what the library's mirror of that side seals.
private struct Exchange {
    let client: MemoryEndpoint
    let server: MemoryEndpoint
    let mirrors: (client: TLSRecordLayer, server: TLSRecordLayer)

    /// One application record (and whatever handshake records go ahead of it), both ways round.
    func send(_ probe: [UInt8], fromClient: Bool) throws(Difference) {
        let (writer, reader) = fromClient ? (client, server) : (server, client)
        let (writerMirror, readerMirror) = fromClient ? (mirrors.client, mirrors.server) : (mirrors.server, mirrors.client)
        let side = fromClient ? "client" : "server"
        guard writer.write(probe) else { throw Difference("OpenSSL's \(side) could not write") }
        // With anything it wrote while reading, such as the answer to a KeyUpdate.
        let fromOpenSSL = writer.takeOutput()
        var sealed = ByteBuffer()
        var outcome: Result<Void, SecurityError> = .success(())
        probe.withUnsafeBytes { raw in
            outcome = Result { () throws(SecurityError) in
                try writerMirror.sealApplicationData(raw, UnsafeRawBufferPointer(start: nil, count: 0), into: &sealed)
            }
        }
        if case .failure(let error) = outcome { throw Difference("the library could not seal the \(side)'s record: \(error.reason)") }
        let fromLibrary = Array(sealed.readableBytesView)
        guard fromLibrary == fromOpenSSL else { throw Difference("the \(side)'s records sealed by the library differ from OpenSSL's") }
        reader.give(fromLibrary)
        guard try reader.read() == probe else { throw Difference("OpenSSL did not open the library's \(side) records") }
        guard try Self.open(fromOpenSSL, with: readerMirror) == probe else {
            throw Difference("the library did not open OpenSSL's \(side) records")
        }
    }

    func closeFromClient() throws(Difference) {
        guard SSL_shutdown(client.ssl) >= 0 else { throw Difference("OpenSSL could not send close_notify") }
        let fromOpenSSL = client.takeOutput()
        var sealed = ByteBuffer()
        mirrors.client.sealCloseNotify(into: &sealed)
        guard Array(sealed.readableBytesView) == fromOpenSSL else { throw Difference("the library's close_notify differs from OpenSSL's") }
        server.give(fromOpenSSL)
        guard try server.read() == nil, try Self.open(fromOpenSSL, with: mirrors.server) == nil else {
            throw Difference("close_notify was not read as the end of the stream")
        }
    }

    /// The application data the library's layer opens from `records`; nil at close_notify.
    private static func open(_ records: [UInt8], with layer: TLSRecordLayer) throws(Difference) -> [UInt8]? {
        var inbound = CiphertextQueue()
        inbound.append(ByteBuffer(bytes: records))
        var alerts = ByteBuffer()
        var opened: [UInt8] = []
        var scratch = [UInt8](repeating: 0, count: TLSEngine.maximumRecordPlaintext)
        while true {
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            scratch.withUnsafeMutableBytes { destination in
                outcome = Result { () throws(SecurityError) in try layer.read(from: &inbound, into: destination, output: &alerts) }
            }
            switch outcome {
            case .failure(let error): throw Difference("the library's layer failed on OpenSSL's records: \(error.reason)")
            case .success(.bytes(let count)): opened += scratch[..<count]
            case .success(.wouldBlock): return opened
            case .success(.closed): return nil
            }
        }
    }
}

/// One OpenSSL endpoint over memory BIOs, its key log captured as an engine's is.
private final class MemoryEndpoint {
    let ssl: OpaquePointer
    private let incoming: OpaquePointer
    private let outgoing: OpaquePointer
    let secrets = TLSTrafficSecretCapture()

    /// A client (offering only `clientSuite`) or, when that is nil, a server.
    init(context: OpaquePointer, clientSuite: String?) throws(Difference) {
        guard let incoming = BIO_new(BIO_s_mem()) else { throw Difference("no memory BIO") }
        guard let outgoing = BIO_new(BIO_s_mem()) else {
            BIO_free(incoming)
            throw Difference("no memory BIO")
        }
        guard let ssl = SSL_new(context) else {
            BIO_free(incoming)
            BIO_free(outgoing)
            throw Difference("SSL_new failed")
        }
        SSL_set_bio(ssl, incoming, outgoing)  // the SSL owns both now
        self.ssl = ssl
        self.incoming = incoming
        self.outgoing = outgoing
        do {
            try secrets.attach(to: ssl)
        } catch {
            throw Difference("the key log could not be attached: \(error.reason)")
        }
        if let clientSuite {
            SSL_set_connect_state(ssl)
            guard SSL_set_ciphersuites(ssl, clientSuite) == 1,
                SSL_set_alpn_protos(ssl, TLSContext.alpnWire, UInt32(TLSContext.alpnWire.count)) == 0
            else { throw Difference("the check's client could not be configured") }
        } else {
            SSL_set_accept_state(ssl)
        }
    }

    deinit {
        SSL_free(ssl)
        OpenSSLErrors.clear()  // what a refused check left queued is not the next caller's
    }

    var pendingOutput: Int { Int(BIO_ctrl_pending(outgoing)) }
    var pendingInput: Int { Int(BIO_ctrl_pending(incoming)) }

    func give(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        _ = bytes.withUnsafeBytes { BIO_write(incoming, $0.baseAddress, Int32($0.count)) }
    }

    func takeOutput() -> [UInt8] {
        let pending = pendingOutput
        guard pending > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = bytes.withUnsafeMutableBytes { BIO_read(outgoing, $0.baseAddress, Int32(pending)) }
        return Array(bytes.prefix(Int(max(0, read))))
    }

    func write(_ bytes: [UInt8]) -> Bool {
        OpenSSLErrors.clear()
        var written = 0
        return SSL_write_ex(ssl, bytes, bytes.count, &written) == 1 && written == bytes.count
    }

    /// All application data that arrived; nil at close_notify.
    func read() throws(Difference) -> [UInt8]? {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: TLSEngine.maximumRecordPlaintext)
        while true {
            OpenSSLErrors.clear()
            var count = 0
            if SSL_read_ex(ssl, &chunk, chunk.count, &count) == 1 {
                received += chunk[..<count]
                continue
            }
            switch SSL_get_error(ssl, 0) {
            case SSL_ERROR_WANT_READ: return received
            case SSL_ERROR_ZERO_RETURN: return received.isEmpty ? nil : received
            default: throw Difference("OpenSSL failed to read records" + OpenSSLErrors.drain())
            }
        }
    }

    /// Runs both ends' handshakes to completion, in a bounded number of flights.
    static func handshake(_ client: MemoryEndpoint, _ server: MemoryEndpoint) throws(Difference) {
        for _ in 0..<4 {
            let clientDone = try client.advance()
            server.give(client.takeOutput())
            let serverDone = try server.advance()
            client.give(server.takeOutput())
            if clientDone && serverDone { return }
        }
        throw Difference("the in-memory handshake did not finish")
    }

    private func advance() throws(Difference) -> Bool {
        OpenSSLErrors.clear()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return true }
        guard SSL_get_error(ssl, result) == SSL_ERROR_WANT_READ else {
            throw Difference("the in-memory handshake failed" + OpenSSLErrors.drain())
        }
        return false
    }
}

