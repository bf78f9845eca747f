import CMultipeerOpenSSL
import CMultipeerShims
import MultipeerWire
import NIOCore

/// One TLS 1.3 connection. Sans-I/O: ciphertext goes in with `receive(_:)` and comes out of
/// `takeOutbound()`, plaintext goes in with `write(_:)` and comes out of `read(into:)`. It knows
/// nothing of channels or pipelines; the caller moves bytes.
///
/// OpenSSL reads records straight out of the received buffers and writes them straight into the
/// outbound buffer (a callback BIO), so no memory BIO copies or regrows them on the way.
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
    /// Received ciphertext that OpenSSL has not read yet, oldest first.
    fileprivate var inbound = CircularBuffer<ByteBuffer>(initialCapacity: 4)
    /// Ciphertext OpenSSL wrote, waiting for `takeOutbound()`.
    fileprivate var outbound = ByteBuffer()
    /// Plaintext written with `coalescing`, held to share a record with the writes after it;
    /// sealed before any other write, or by `sealHeld()`. (A KeyUpdate answer OpenSSL writes
    /// while reading may go out ahead of it: a handshake message, not application data.)
    private var held = ByteBuffer()
    /// Large buffers recently handed out. Once the channel has written and released one, it is
    /// filled again instead of a fresh allocation, whose pages the kernel would fault in and zero
    /// anew for every frame of a bulk transfer. Dropped as soon as traffic turns small.
    /// (An array: its elements are modified in place, so the uniqueness check sees one reference.)
    private var handedOut: [ByteBuffer] = []
    private static let recycledBufferLimit = 16
    private static let recycledBufferMinimum = 16_384

    /// A KeyUpdate is sent before this many records have been sealed under one key (RFC 8446 §5.5).
    public let recordsPerKeyUpdate: UInt64
    private var recordsSinceKeyUpdate: UInt64 = 0
    /// KeyUpdates this side started because of its record limit.
    public private(set) var keyUpdatesInitiated = 0
    /// All KeyUpdate messages sent, including answers to the peer's requests.
    public private(set) var keyUpdatesSent = 0
    public private(set) var keyUpdatesReceived = 0
    public private(set) var isHandshakeComplete = false

    public static let maximumRecordPlaintext = 16_384
    /// Bytes a TLS 1.3 record adds to its plaintext: header, content type, AEAD tag.
    static let recordOverhead = 5 + 1 + 16

    public init(
        context: TLSContext, role: Role, recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate
    ) throws(SecurityError) {
        precondition(recordsPerKeyUpdate > 0, "recordsPerKeyUpdate must be positive")
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
        switch role {
        case .client:
            SSL_set_connect_state(ssl)
            guard SSL_set_alpn_protos(ssl, TLSContext.alpnWire, UInt32(TLSContext.alpnWire.count)) == 0 else {
                throw SecurityError.openSSL(.internalError, "ALPN")
            }
        case .server:
            SSL_set_accept_state(ssl)
        }
        SSL_set_msg_callback(ssl, countKeyUpdates)
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { SSL_free(ssl) }

    /// Ciphertext from the network. Kept, not copied, until OpenSSL reads it.
    public func receive(_ bytes: ByteBuffer) {
        if bytes.readableBytes > 0 { inbound.append(bytes) }
    }

    /// Received ciphertext not yet consumed by OpenSSL.
    public var bufferedInboundByteCount: Int { inbound.reduce(0) { $0 + $1.readableBytes } }

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
            handedOut.removeAll()  // small traffic: hold no large buffers
            return
        }
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
        inbound.readBytes(into: destination)
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
            guard negotiatedALPN == WireLimits.alpnProtocol else {
                throw SecurityError(.tlsHandshakeFailed, "the peer did not select ALPN \(WireLimits.alpnProtocol)")
            }
            isHandshakeComplete = true
            return .complete
        }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .inProgress
        default:
            throw SecurityError.openSSL(.tlsHandshakeFailed, "TLS handshake failed")
        }
    }

    /// Seals `plaintext`; the records appear in `takeOutbound()`.
    public func write(_ plaintext: ByteBuffer) throws(SecurityError) {
        try write(head: plaintext, body: ByteBuffer())
    }

    /// Seals `head` followed by `body` as one byte stream. Records are cut from `body` in place;
    /// only the head and the start of the body share a staging copy, so a caller can frame a large
    /// payload without copying it.
    /// Give `head` room for the start of the body and pass it with `consume`: the body's first
    /// bytes are then staged in it without another allocation.
    /// With `coalescing`, a write that fits in one record is held instead, so that a burst of
    /// small frames becomes one record: OpenSSL's cost per record is far above its cost per byte
    /// for them. Held bytes are sealed, in order, before any later write and by `sealHeld()`,
    /// which the caller owes before it takes the outbound bytes to send them.
    public func write(head: consuming ByteBuffer, body: ByteBuffer, coalescing: Bool = false) throws(SecurityError) {
        guard isHandshakeComplete else { throw SecurityError(.tlsFailure, "write before the handshake completed") }
        var staged = consume head
        let total = staged.readableBytes + body.readableBytes
        if coalescing, total <= Self.maximumRecordPlaintext - held.readableBytes {
            hold(consume staged, body)
            return
        }
        try sealHeld()
        if coalescing, total <= Self.maximumRecordPlaintext {
            hold(consume staged, body)
            return
        }
        let records = (total + Self.maximumRecordPlaintext - 1) / Self.maximumRecordPlaintext
        prepareOutbound(for: total + records * Self.recordOverhead)
        var body = body
        if staged.readableBytes > 0 {
            if staged.readableBytes < Self.maximumRecordPlaintext, body.readableBytes > 0 {
                let taken = min(body.readableBytes, Self.maximumRecordPlaintext - staged.readableBytes)
                var slice = body.readSlice(length: taken)!
                staged.writeBuffer(&slice)
            }
            try writeRecords(staged)
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
            held.reserveCapacity(minimumWritableBytes: Self.maximumRecordPlaintext - held.readableBytes)
            held.writeImmutableBuffer(head)
        }
        held.writeImmutableBuffer(body)
    }

    private func writeRecords(_ plaintext: ByteBuffer) throws(SecurityError) {
        var remaining = plaintext
        while remaining.readableBytes > 0 {
            OpenSSLErrors.clear()  // a failure then reports its own errors, not another caller's
            if recordsSinceKeyUpdate >= recordsPerKeyUpdate {
                guard SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1 else {
                    throw SecurityError.openSSL(.tlsFailure, "KeyUpdate failed")
                }
                recordsSinceKeyUpdate = 0
                keyUpdatesInitiated += 1
            }
            // One record at a time, so the key-update count stays exact.
            let chunk = min(remaining.readableBytes, Self.maximumRecordPlaintext)
            var written = 0
            let ok = remaining.withUnsafeReadableBytes { raw in
                SSL_write_ex(ssl, raw.baseAddress, chunk, &written) == 1
            }
            guard ok, written == chunk else { throw SecurityError.openSSL(.tlsFailure, "TLS write failed") }
            remaining.moveReaderIndex(forwardBy: chunk)
            recordsSinceKeyUpdate += 1
        }
    }

    /// Opens received records into `destination`, as far as it reaches.
    public func read(into destination: UnsafeMutableRawBufferPointer) throws(SecurityError) -> ReadStatus {
        guard isHandshakeComplete, destination.count > 0 else { return .wouldBlock }
        var read = 0
        OpenSSLErrors.clear()  // else another caller's error turns wouldBlock or close into a failure
        if SSL_read_ex(ssl, destination.baseAddress, destination.count, &read) == 1 { return .bytes(read) }
        switch SSL_get_error(ssl, 0) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .wouldBlock
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        default:
            throw SecurityError.openSSL(.tlsFailure, "TLS read failed")
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
        if isHandshakeComplete { _ = SSL_shutdown(ssl) }
        OpenSSLErrors.clear()
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

    fileprivate func noteKeyUpdate(sent: Bool) {
        if sent { keyUpdatesSent += 1 } else { keyUpdatesReceived += 1 }
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

/// Counts KeyUpdate handshake messages in both directions, so tests can see rekeying happen.
private func countKeyUpdates(
    _ writeP: Int32, _ version: Int32, _ contentType: Int32, _ buffer: UnsafeRawPointer?, _ length: Int,
    _ ssl: OpaquePointer?, _ argument: UnsafeMutableRawPointer?
) {
    guard contentType == SSL3_RT_HANDSHAKE, length > 0, let buffer, let argument,
        buffer.load(as: UInt8.self) == UInt8(SSL3_MT_KEY_UPDATE)
    else { return }
    Unmanaged<TLSEngine>.fromOpaque(argument).takeUnretainedValue().noteKeyUpdate(sent: writeP == 1)
}
