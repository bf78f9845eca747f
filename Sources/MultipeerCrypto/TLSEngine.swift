import CMultipeerOpenSSL
import CMultipeerShims
import MultipeerWire
import NIOCore

/// One TLS 1.3 connection over OpenSSL memory BIOs. Sans-I/O: ciphertext goes in with
/// `receive(_:)` and comes out of `takeOutbound()`, plaintext goes in with `write(_:)` and comes
/// out of `readPlaintext()`. It knows nothing of channels or pipelines; the caller moves bytes.
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

    public let role: Role
    private let context: TLSContext
    private let ssl: OpaquePointer
    private let inbound: OpaquePointer
    private let outbound: OpaquePointer

    /// A KeyUpdate is sent before this many records have been sealed under one key (RFC 8446 §5.5).
    public let recordsPerKeyUpdate: UInt64
    private var recordsSinceKeyUpdate: UInt64 = 0
    /// KeyUpdates this side started because of its record limit.
    public private(set) var keyUpdatesInitiated = 0
    /// All KeyUpdate messages sent, including answers to the peer's requests.
    public private(set) var keyUpdatesSent = 0
    public private(set) var keyUpdatesReceived = 0
    public private(set) var isHandshakeComplete = false

    static let maximumRecordPlaintext = 16_384

    public init(
        context: TLSContext, role: Role, recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate
    ) throws(SecurityError) {
        precondition(recordsPerKeyUpdate > 0, "recordsPerKeyUpdate must be positive")
        guard let ssl = SSL_new(role == .server ? context.server : context.client) else {
            throw SecurityError.openSSL(.internalError, "SSL_new failed")
        }
        guard let inbound = BIO_new(BIO_s_mem()), let outbound = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw SecurityError.openSSL(.internalError, "BIO_new failed")
        }
        SSL_set_bio(ssl, inbound, outbound)  // the SSL now owns both BIOs
        self.role = role
        self.context = context
        self.ssl = ssl
        self.inbound = inbound
        self.outbound = outbound
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        switch role {
        case .client:
            SSL_set_connect_state(ssl)
            guard SSL_set_alpn_protos(ssl, TLSContext.alpnWire, UInt32(TLSContext.alpnWire.count)) == 0 else {
                SSL_free(ssl)
                throw SecurityError.openSSL(.internalError, "ALPN")
            }
        case .server:
            SSL_set_accept_state(ssl)
        }
        SSL_set_msg_callback(ssl, countKeyUpdates)
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { SSL_free(ssl) }

    /// Ciphertext from the network.
    public func receive(_ bytes: ByteBuffer) {
        bytes.withUnsafeReadableBytes { raw in
            if let base = raw.baseAddress, raw.count > 0 { _ = BIO_write(inbound, base, Int32(raw.count)) }
        }
    }

    /// Ciphertext for the network, if any is waiting.
    public func takeOutbound() -> ByteBuffer? {
        let pending = Int(BIO_ctrl_pending(outbound))
        guard pending > 0 else { return nil }
        var buffer = ByteBufferAllocator().buffer(capacity: pending)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: pending) { raw in
            Int(max(0, BIO_read(outbound, raw.baseAddress, Int32(pending))))
        }
        return buffer
    }

    /// Runs the handshake as far as the received bytes allow.
    public func advanceHandshake() throws(SecurityError) -> HandshakeProgress {
        guard !isHandshakeComplete else { return .complete }
        OpenSSLErrors.clear()
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
        guard isHandshakeComplete else { throw SecurityError(.tlsFailure, "write before the handshake completed") }
        var remaining = plaintext
        while remaining.readableBytes > 0 {
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

    /// Opens whatever complete records have arrived.
    public func readPlaintext() throws(SecurityError) -> ReadResult {
        guard isHandshakeComplete else { return .plaintext(ByteBuffer()) }
        var output = ByteBuffer()
        while true {
            var read = 0
            output.reserveCapacity(minimumWritableBytes: Self.maximumRecordPlaintext)
            let result = output.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.maximumRecordPlaintext) { raw in
                SSL_read_ex(ssl, raw.baseAddress, raw.count, &read) == 1 ? read : 0
            }
            if result > 0 { continue }
            switch SSL_get_error(ssl, 0) {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                return .plaintext(output)
            case SSL_ERROR_ZERO_RETURN:
                return output.readableBytes > 0 ? .plaintext(output) : .closed
            default:
                throw SecurityError.openSSL(.tlsFailure, "TLS read failed")
            }
        }
    }

    /// Queues close_notify.
    public func close() {
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
