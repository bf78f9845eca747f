import CMultipeerOpenSSL
import CMultipeerShims
import Logging
import MultipeerWire
import NIOCore

/// One TLS 1.3 connection. Sans-I/O: ciphertext goes in with `receive(_:)` and comes out of
/// `takeOutbound()`, plaintext goes in with `write(_:)` and comes out of `read(into:)`. It knows
/// nothing of channels or pipelines; the caller moves bytes.
///
/// OpenSSL runs the handshake, reading straight out of the received buffers and writing straight
/// into the outbound buffer (a callback BIO). After it, `TLSRecordLayer` seals and opens records
/// with the traffic secrets the handshake derived: OpenSSL's record layer cost several times the
/// cipher's own work on small records, and extra copies of every byte on large ones. Where
/// `TLSRecordLayerGuard` refuses the library's layer, or `MULTIPEER_TLS_RECORD_LAYER=openssl`
/// says so, OpenSSL's own protects the records instead (`OpenSSLRecordLayer`), over the same
/// buffers and with the same API.
///
/// Not thread-safe: one engine belongs to one connection's event loop.
public final class TLSEngine {
    public enum Role: Sendable { case client, server }

    public enum HandshakeProgress: Equatable, Sendable { case inProgress, complete }

    public enum ReadResult: Equatable {
        /// Zero or more bytes; empty means "nothing yet".
        case plaintext(ByteBuffer)
        /// The peer sent close_notify.
        case closed
    }

    /// What one `read(into:)` produced.
    public enum ReadStatus: Equatable, Sendable {
        /// This many bytes (at least one) were written to the front of the destination.
        case bytes(Int)
        /// No complete record is waiting.
        case wouldBlock
        /// The peer sent close_notify.
        case closed
    }

    public let role: Role
    private let context: TLSContext
    private let ssl: OpaquePointer
    // Exclusivity is unchecked on the per-record state here and in the record layer: an engine
    // belongs to one connection on one event loop and is never entered re-entrantly, and the
    // runtime's checks cost several hundred instructions per message
    // (docs/benchmarks/HISTORY.md, "The round trip's own work").
    /// Received ciphertext not read yet, oldest first.
    @exclusivity(unchecked) fileprivate var inbound = CiphertextQueue()
    /// Ciphertext waiting for `takeOutbound()`.
    @exclusivity(unchecked) fileprivate var outbound = ByteBuffer()
    /// The handshake's application traffic secrets, until the record layer takes them.
    private let secrets = TLSTrafficSecretCapture()

    private enum Records {
        case library(TLSRecordLayer)
        case openSSL(OpenSSLRecordLayer)

        var acceptsWrites: Bool {
            switch self {
            case .library(let layer): layer.acceptsWrites
            case .openSSL(let layer): layer.acceptsWrites
            }
        }
    }

    /// Protects application data once the handshake is complete.
    @exclusivity(unchecked) private var records: Records?
    private let recordLayerPolicy: TLSRecordLayerPolicy
    private let recordLayerGuard: TLSRecordLayerGuard
    private let logger: Logger
    /// Which layer protects this connection's records; nil until the handshake is complete.
    package var recordLayer: TLSRecordLayerKind? {
        switch records {
        case .library: .library
        case .openSSL: .openSSL
        case nil: nil
        }
    }
    /// Why this connection uses its record layer.
    package private(set) var recordLayerReason: String?
    /// Plaintext written with `coalescing`, held to share a record with the writes after it;
    /// sealed before any other write, or by `sealHeld()`.
    @exclusivity(unchecked) private var held = ByteBuffer()
    /// Large buffers recently handed out. Once the channel has written and released one, it is
    /// filled again instead of a fresh allocation, whose pages the kernel would fault in and zero
    /// anew for every frame of a bulk transfer. Dropped once traffic turns small (two small writes in a row).
    /// (An array: its elements are modified in place, so the uniqueness check sees one reference.)
    @exclusivity(unchecked) private var handedOut: [ByteBuffer] = []
    private static let recycledBufferLimit = 16
    /// Small writes since the last large one. The second in a row lets the large buffers go;
    /// one alone does not, since a large message ends in a small frame.
    @exclusivity(unchecked) private var smallWritesInARow = 0
    private static let recycledBufferMinimum = 16_384

    /// A KeyUpdate is sent before this many records have been sealed under one key (RFC 8446 §5.5).
    public let recordsPerKeyUpdate: UInt64
    /// KeyUpdates this side started because of its record limit.
    public var keyUpdatesInitiated: Int {
        switch records {
        case .library(let layer): layer.keyUpdatesInitiated
        case .openSSL(let layer): layer.keyUpdatesInitiated
        case nil: 0
        }
    }
    /// All KeyUpdate messages sent, including answers to the peer's requests.
    public var keyUpdatesSent: Int {
        switch records {
        case .library(let layer): layer.keyUpdatesSent
        case .openSSL(let layer): layer.keyUpdatesSent
        case nil: 0
        }
    }
    public var keyUpdatesReceived: Int {
        switch records {
        case .library(let layer): layer.keyUpdatesReceived
        case .openSSL(let layer): layer.keyUpdatesReceived
        case nil: 0
        }
    }
    public var isHandshakeComplete: Bool { records != nil }

    public static let maximumRecordPlaintext = 16_384
    /// The most plaintext this side puts in one record: 16 KiB, or less when a client
    /// negotiated max_fragment_length (RFC 6066), which OpenSSL's server accepts.
    public private(set) var recordLimit = TLSEngine.maximumRecordPlaintext
    /// Bytes a TLS 1.3 record adds to its plaintext: header, content type, AEAD tag.
    static let recordOverhead = TLSRecordProtection.headerLength + 1 + TLSRecordProtection.tagLength

    public convenience init(
        context: TLSContext, role: Role, recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate
    ) throws(SecurityError) {
        try self.init(context: context, role: role, recordsPerKeyUpdate: recordsPerKeyUpdate, recordLayer: nil)
    }

    /// `recordLayer` nil takes `MULTIPEER_TLS_RECORD_LAYER`, else the guard's verdict; tests may
    /// force a layer, or ask a guard of their own. `logger` hears the guard's verdict when this
    /// engine is the one that checks, and the switch's once per process.
    package init(
        context: TLSContext, role: Role, recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate,
        recordLayer: TLSRecordLayerPolicy?, recordLayerGuard: TLSRecordLayerGuard = .process,
        logger: Logger = Logger(label: "MultipeerCrypto", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws(SecurityError) {
        precondition(recordsPerKeyUpdate > 0, "recordsPerKeyUpdate must be positive")
        self.recordLayerPolicy = recordLayer ?? .environment
        self.recordLayerGuard = recordLayerGuard
        self.logger = logger
        if recordLayer == nil { TLSRecordLayerPolicy.announceEnvironment(to: logger) }
        guard let ssl = SSL_new(role == .server ? context.server : context.client) else {
            throw SecurityError.openSSL(.internalError, "SSL_new failed")
        }
        self.role = role
        self.context = context
        self.ssl = ssl
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        // From here on deinit frees the SSL, whatever fails.
        guard let bio = mp_callback_bio_new(Unmanaged.passUnretained(self).toOpaque(), engineBIOWrite, engineBIORead) else {
            throw SecurityError.openSSL(.internalError, "BIO_new failed")
        }
        SSL_set_bio(ssl, bio, bio)  // the SSL now owns the BIO
        // With OpenSSL's layer forced, the traffic secrets are never copied out of OpenSSL.
        if recordLayerPolicy != .forced(.openSSL) { try secrets.attach(to: ssl) }
        switch role {
        case .client:
            SSL_set_connect_state(ssl)
            guard SSL_set_alpn_protos(ssl, TLSContext.alpnWire, UInt32(TLSContext.alpnWire.count)) == 0 else {
                throw SecurityError.openSSL(.internalError, "ALPN")
            }
        case .server:
            SSL_set_accept_state(ssl)
        }
    }

    deinit { SSL_free(ssl) }

    /// Ciphertext from the network. Kept, not copied, until it is read.
    public func receive(_ bytes: ByteBuffer) {
        inbound.append(bytes)
    }

    /// Received ciphertext not yet read.
    public var bufferedInboundByteCount: Int { inbound.byteCount }

    /// Bytes received and not yet read: plaintext opened and waiting, and ciphertext (which
    /// opens to fewer bytes). `read(into:)` returns no more than this without more input.
    package var receivedByteCountUnread: Int {
        switch records {
        case .library(let layer): inbound.byteCount + layer.openedByteCount
        case .openSSL(let layer): inbound.byteCount + layer.pendingByteCount
        case nil: inbound.byteCount
        }
    }

    /// Records the library's layer opened into scratch storage and copied out (for tests).
    package var recordsOpenedAside: Int {
        if case .library(let layer) = records { return layer.recordsOpenedAside }
        return 0
    }

    /// Ciphertext for the network, if any is waiting.
    public func takeOutbound() -> ByteBuffer? {
        guard outbound.readableBytes > 0 else { return nil }
        defer { outbound = ByteBuffer() }
        if outbound.capacity >= Self.recycledBufferMinimum {
            if handedOut.count == Self.recycledBufferLimit { handedOut.removeFirst() }
            handedOut.append(outbound)
        }
        return outbound
    }

    /// Large handed-out buffers kept for reuse (for tests).
    var recycledOutboundBufferCount: Int { handedOut.count }

    /// Makes `outbound` ready for `count` more bytes, reusing a released buffer when one fits.
    private func prepareOutbound(for count: Int) {
        guard outbound.capacity == 0 else {
            outbound.reserveCapacity(minimumWritableBytes: count)
            return
        }
        guard count >= Self.recycledBufferMinimum else {
            smallWritesInARow += 1
            if smallWritesInARow > 1 { handedOut.removeAll() }  // small traffic: hold no large buffers
            return
        }
        smallWritesInARow = 0
        for index in handedOut.indices where handedOut[index].capacity >= count {
            let released = handedOut[index].modifyIfUniquelyOwned { buffer in buffer.clear() } != nil
            if released {
                outbound = handedOut.remove(at: index)
                return
            }
        }
        outbound.reserveCapacity(count)
    }

    fileprivate func fillFromInbound(_ destination: UnsafeMutableRawBufferPointer) -> Int {
        inbound.read(into: destination)
    }

    fileprivate func appendOutbound(_ bytes: UnsafeRawBufferPointer) {
        outbound.writeBytes(bytes)
    }

    /// Runs the handshake as far as the received bytes allow.
    public func advanceHandshake() throws(SecurityError) -> HandshakeProgress {
        guard !isHandshakeComplete else { return .complete }
        OpenSSLErrors.clear()  // SSL_get_error reads the whole thread queue, stale entries too
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            defer { secrets.clear() }  // the record layer holds its own keys now, or there is none
            guard negotiatedALPN == WireLimits.alpnProtocol else {
                throw SecurityError(.tlsHandshakeFailed, "the peer did not select ALPN \(WireLimits.alpnProtocol)")
            }
            try startRecordLayer()
            // What was negotiated, so an operator (or an interop run) can see it; no secrets.
            logger.debug("TLS handshake complete", metadata: [
                "role": "\(role)", "group": "\(negotiatedGroup ?? "none")",
                "cipherSuite": "\(negotiatedCipherSuite ?? "none")", "recordLayer": "\(recordLayer?.rawValue ?? "none")",
                "recordLayerReason": "\(recordLayerReason ?? "none")",
            ])
            return .complete
        }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .inProgress
        default:
            secrets.clear()  // a handshake can fail after its traffic secrets were derived
            throw SecurityError.openSSL(.tlsHandshakeFailed, "TLS handshake failed")
        }
    }

    /// Hands record protection over from OpenSSL, to the library's layer or, where the policy
    /// or the guard says so, to OpenSSL's own. OpenSSL reads one record at a time and sends no
    /// session tickets, so neither side has sealed or opened a record under the application
    /// traffic keys yet: both sequence numbers start at zero.
    private func startRecordLayer() throws(SecurityError) {
        guard let cipher = SSL_get_current_cipher(ssl), let suite = TLSCipherSuite(protocolID: SSL_CIPHER_get_protocol_id(cipher)) else {
            throw SecurityError(.tlsHandshakeFailed, "a cipher suite this engine does not protect records with")
        }
        // Modes 1-4 are 512, 1,024, 2,048 and 4,096 bytes; 0 is none.
        if let session = SSL_get_session(ssl), case let mode = SSL_SESSION_get_max_fragment_length(session), (1...4).contains(mode) {
            recordLimit = 256 << Int(mode)
        }
        let kind: TLSRecordLayerKind
        switch recordLayerPolicy {
        case .forced(let forced):
            kind = forced
            recordLayerReason = "forced"
        case .guarded, .comparedOnAnyRelease:
            switch recordLayerGuard.verdict(for: suite, onAnyRelease: recordLayerPolicy == .comparedOnAnyRelease, logger: logger) {
            case .agrees:
                kind = .library
                recordLayerReason = "the guard found it agrees with OpenSSL's"
            case .refused(let why):
                kind = .openSSL
                recordLayerReason = why
            }
        }
        if kind == .openSSL {
            records = .openSSL(OpenSSLRecordLayer(ssl: ssl, recordsPerKeyUpdate: recordsPerKeyUpdate) { [unowned self] in
                inbound.byteCount > 0
            })
            return
        }
        guard SSL_has_pending(ssl) == 0 else {
            throw SecurityError(.internalError, "OpenSSL read past the end of the handshake")
        }
        guard let client = secrets.client, let server = secrets.server else {
            throw SecurityError(.internalError, "the handshake's traffic secrets were not captured")
        }
        records = .library(try TLSRecordLayer(
            suite: suite, role: role, clientSecret: client, serverSecret: server, recordsPerKeyUpdate: recordsPerKeyUpdate))
    }

    /// Seals `plaintext`; the records appear in `takeOutbound()`.
    public func write(_ plaintext: ByteBuffer) throws(SecurityError) {
        try write(head: plaintext, body: ByteBuffer())
    }

    /// Seals `head` followed by `body` as one byte stream. Records are sealed from `head` and
    /// `body` in place, so a caller can frame a large payload without copying it.
    /// With `coalescing`, a write that fits in one record is held instead, so that a burst of
    /// small frames becomes one record: a record's fixed cost is far above its cost per byte
    /// for them. Held bytes are sealed, in order, before any later write and by `sealHeld()`,
    /// which the caller owes before it takes the outbound bytes to send them. Give a head that
    /// may be held room for its body and pass it with `consume`: the body is then copied behind
    /// it without another allocation.
    public func write(head: consuming ByteBuffer, body: ByteBuffer, coalescing: Bool = false) throws(SecurityError) {
        guard let records else { throw SecurityError(.tlsFailure, "write before the handshake completed") }
        // Refused here, not when held bytes are sealed, so that no write is taken and then lost.
        guard records.acceptsWrites else { throw SecurityError(.tlsFailure, "write after close_notify or a failure") }
        let staged = consume head
        let total = staged.readableBytes + body.readableBytes
        if coalescing, total <= recordLimit - held.readableBytes {
            hold(consume staged, body)
            return
        }
        try sealHeld()
        if coalescing, total <= recordLimit {
            hold(consume staged, body)
            return
        }
        let recordCount = (total + recordLimit - 1) / recordLimit
        prepareOutbound(for: total + recordCount * Self.recordOverhead)
        var body = body
        if staged.readableBytes > 0 {
            if staged.readableBytes < recordLimit, body.readableBytes > 0 {
                // The head and the start of the body share the first record, sealed from both in place.
                let slice = body.readSlice(length: min(body.readableBytes, recordLimit - staged.readableBytes))!
                try sealRecord(staged, slice)
            } else {
                try writeRecords(staged)
            }
        }
        try writeRecords(body)
    }

    /// Seals what `write(head:body:coalescing:)` held; the records appear in `takeOutbound()`.
    public func sealHeld() throws(SecurityError) {
        guard held.readableBytes > 0 else { return }
        let plaintext = held
        held = ByteBuffer()
        prepareOutbound(for: plaintext.readableBytes + Self.recordOverhead)
        try writeRecords(plaintext)
    }

    /// Plaintext bytes held for coalescing.
    public var heldByteCount: Int { held.readableBytes }

    /// Ciphertext waiting for `takeOutbound()`.
    public var outboundByteCount: Int { outbound.readableBytes }

    private func hold(_ head: consuming ByteBuffer, _ body: ByteBuffer) {
        if held.readableBytes == 0 {
            held = head  // a lone frame costs no copy; its head has room for its body
        } else {
            // A second frame: room for a whole record at once, not a regrowth per frame.
            held.reserveCapacity(minimumWritableBytes: recordLimit - held.readableBytes)
            held.writeImmutableBuffer(head)
        }
        held.writeImmutableBuffer(body)
    }

    private func writeRecords(_ plaintext: ByteBuffer) throws(SecurityError) {
        var remaining = plaintext
        while remaining.readableBytes > 0 {
            try sealRecord(remaining.readSlice(length: min(remaining.readableBytes, recordLimit))!, ByteBuffer())
        }
    }

    /// Seals one record from `first` followed by `second`.
    private func sealRecord(_ first: ByteBuffer, _ second: ByteBuffer) throws(SecurityError) {
        guard let records else { throw SecurityError(.tlsFailure, "write before the handshake completed") }
        var outcome: Result<Void, SecurityError> = .success(())
        first.withUnsafeReadableBytes { head in
            second.withUnsafeReadableBytes { tail in
                outcome = Result { () throws(SecurityError) in
                    switch records {
                    case .library(let layer): try layer.sealApplicationData(head, tail, into: &outbound)
                    case .openSSL(let layer): try layer.seal(head, tail)  // into `outbound`, through the BIO
                    }
                }
            }
        }
        try outcome.get()
    }

    /// Opens received records into `destination`, as far as it reaches.
    public func read(into destination: UnsafeMutableRawBufferPointer) throws(SecurityError) -> ReadStatus {
        guard let records, destination.count > 0 else { return .wouldBlock }
        switch records {
        case .library(let layer): return try layer.read(from: &inbound, into: destination, output: &outbound)
        case .openSSL(let layer): return try layer.read(into: destination)
        }
    }

    /// Opens whatever complete records have arrived, into a new buffer.
    public func readPlaintext() throws(SecurityError) -> ReadResult {
        guard isHandshakeComplete else { return .plaintext(ByteBuffer()) }
        var output = ByteBuffer()
        while true {
            var outcome = Result<ReadStatus, SecurityError>.success(.wouldBlock)
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.maximumRecordPlaintext) { raw in
                outcome = Result { () throws(SecurityError) in try read(into: raw) }
                if case .success(.bytes(let count)) = outcome { return count }
                return 0
            }
            switch try outcome.get() {
            case .bytes: continue
            case .wouldBlock: return .plaintext(output)
            case .closed: return output.readableBytes > 0 ? .plaintext(output) : .closed
            }
        }
    }

    /// Queues close_notify.
    public func close() {
        try? sealHeld()  // held frames go ahead of close_notify; a failure here ends the connection anyway
        switch records {
        case .library(let layer): layer.sealCloseNotify(into: &outbound)
        case .openSSL(let layer): layer.sealCloseNotify()
        case nil: break
        }
    }

    /// The peer's certificate chain, leaf first; empty if it presented none.
    public var peerCertificateChain: [Certificate] {
        guard let leaf = SSL_get0_peer_certificate(ssl) else { return [] }
        var chain = [Certificate(retaining: leaf)]
        if let stack = SSL_get_peer_cert_chain(ssl) {
            // A client's view includes the leaf, a server's does not.
            for index in 0..<mp_sk_X509_num(stack) {
                if let x509 = mp_sk_X509_value(stack, index), X509_cmp(x509, leaf) != 0 {
                    chain.append(Certificate(retaining: x509))
                }
            }
        }
        return chain
    }

    public var negotiatedALPN: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    public var negotiatedCipherSuite: String? {
        guard let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_get_name(cipher) else { return nil }
        return String(cString: name)
    }

    public var protocolVersion: String { String(cString: SSL_get_version(ssl)) }

    /// The key exchange group the handshake used, by OpenSSL's name ("X25519MLKEM768", "x25519",
    /// "secp256r1"); nil before the handshake.
    public var negotiatedGroup: String? {
        let group = mp_SSL_get_negotiated_group(ssl)
        guard group != 0, let name = SSL_group_to_name(ssl, group) else { return nil }
        return String(cString: name)
    }

    /// RFC 8446 §7.5 exporter output, wiped when released.
    public func exportKeyingMaterial(label: String, context exporterContext: [UInt8], length: Int) throws(SecurityError) -> SecureBytes {
        guard isHandshakeComplete else { throw SecurityError(.tlsFailure, "export before the handshake completed") }
        let labelBytes = Array(label.utf8)
        var failed = false
        let key = SecureBytes(count: length) { out in
            failed = SSL_export_keying_material(
                ssl, out.baseAddress?.assumingMemoryBound(to: UInt8.self), length,
                labelBytes.map { CChar(bitPattern: $0) }, labelBytes.count, exporterContext, exporterContext.count, 1) != 1
        }
        guard !failed else { throw SecurityError.openSSL(.tlsFailure, "keying material export failed") }
        return key
    }

}

private let engineBIOWrite: mp_bio_write_callback = { context, data, length in
    guard let context, let data else { return }
    Unmanaged<TLSEngine>.fromOpaque(context).takeUnretainedValue().appendOutbound(UnsafeRawBufferPointer(start: data, count: length))
}

private let engineBIORead: mp_bio_read_callback = { context, data, length in
    guard let context, let data else { return 0 }
    return Unmanaged<TLSEngine>.fromOpaque(context).takeUnretainedValue().fillFromInbound(UnsafeMutableRawBufferPointer(start: data, count: length))
}
