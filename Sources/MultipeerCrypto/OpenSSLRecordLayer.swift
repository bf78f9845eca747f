import CMultipeerOpenSSL

/// TLS 1.3 after the handshake through OpenSSL's own record layer (SSL_write, SSL_read,
/// SSL_shutdown): the fallback for an OpenSSL the library's `TLSRecordLayer` has not been checked
/// against (`TLSRecordLayerGuard`), or what `MULTIPEER_TLS_RECORD_LAYER=openssl` asks for.
///
/// Records go through the engine's callback BIO, so they come from and land in the engine's own
/// buffers, as the handshake's do. The engine's semantics are kept: one record per write of at
/// most the record limit, a KeyUpdate requested before `recordsPerKeyUpdate` records under one
/// key (OpenSSL never starts one itself), the first failure sticks, nothing is written after
/// close_notify. OpenSSL answers each of the peer's KeyUpdate requests itself, while reading or
/// ahead of this side's next record; so that a peer cannot have it derive keys, queue answers or
/// copy session tickets without end, the connection fails past
/// `TLSRecordLayer.maximumRecordsWithoutData` post-handshake messages (KeyUpdates, tickets) in a
/// row without application data, or KeyUpdate requests while this side writes nothing. OpenSSL
/// reads one record per call here (`SSL_MODE_AUTO_RETRY` off, read_ahead off), so the count is
/// checked after every record, not after a whole socket read of them. The bound ends the
/// connection without an alert: OpenSSL has no call to send one on the library's behalf.
final class OpenSSLRecordLayer {
    private let ssl: OpaquePointer
    private let hasBufferedInput: () -> Bool
    let recordsPerKeyUpdate: UInt64
    private var recordsSinceKeyUpdate: UInt64 = 0
    /// The first failure, reading or writing; every later call fails with it, and no
    /// close_notify follows it (OpenSSL forbids SSL_shutdown after a fatal error).
    private var failure: SecurityError?
    private var closeNotifySent = false
    /// Post-handshake messages read since the last application data, and KeyUpdate requests
    /// since this side last wrote.
    private var messagesWithoutData = 0
    private var requestsWithoutWrite = 0

    private(set) var keyUpdatesInitiated = 0
    private(set) var keyUpdatesSent = 0
    private(set) var keyUpdatesReceived = 0

    /// Takes over `ssl` once its handshake is complete. The engine frees the SSL before this
    /// goes, so the callback never finds it gone.
    /// `hasBufferedInput`: whether the engine holds received bytes OpenSSL has not read yet.
    init(ssl: OpaquePointer, recordsPerKeyUpdate: UInt64, hasBufferedInput: @escaping () -> Bool) {
        self.ssl = ssl
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        self.hasBufferedInput = hasBufferedInput
        // One record per SSL_read: a call must not go through a socket read's worth of KeyUpdates
        // or tickets before the bound below is checked.
        _ = SSL_ctrl(ssl, SSL_CTRL_CLEAR_MODE, Int(SSL_MODE_AUTO_RETRY), nil)
        SSL_set_msg_callback(ssl, noteKeyUpdates)
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    var acceptsWrites: Bool { !closeNotifySent && failure == nil }

    /// Writes one record from `content` followed by `more` (together at most the record limit).
    func seal(_ content: UnsafeRawBufferPointer, _ more: UnsafeRawBufferPointer) throws(SecurityError) {
        guard acceptsWrites else { throw failure ?? SecurityError(.tlsFailure, "write after close_notify") }
        guard more.count > 0 else { return try write(content) }
        // SSL_write takes one piece: the two are joined (at most one record's worth).
        let total = content.count + more.count
        var outcome: Result<Void, SecurityError> = .success(())
        withUnsafeTemporaryAllocation(byteCount: total, alignment: 1) { joined in
            if let base = content.baseAddress { joined.baseAddress!.copyMemory(from: base, byteCount: content.count) }
            (joined.baseAddress! + content.count).copyMemory(from: more.baseAddress!, byteCount: more.count)
            outcome = Result { () throws(SecurityError) in try write(UnsafeRawBufferPointer(joined)) }
        }
        try outcome.get()
    }

    private func write(_ plaintext: UnsafeRawBufferPointer) throws(SecurityError) {
        guard plaintext.count > 0 else { return }
        OpenSSLErrors.clear()  // a failure then reports its own errors, not another caller's
        if recordsSinceKeyUpdate >= recordsPerKeyUpdate {
            guard SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1 else {
                throw fail(SecurityError.openSSL(.tlsFailure, "KeyUpdate failed"))
            }
            keyUpdatesInitiated += 1
        }
        var written = 0
        guard SSL_write_ex(ssl, plaintext.baseAddress, plaintext.count, &written) == 1, written == plaintext.count else {
            throw fail(SecurityError.openSSL(.tlsFailure, "TLS write failed"))
        }
        recordsSinceKeyUpdate += 1
        requestsWithoutWrite = 0
    }

    /// Plaintext OpenSSL has opened and not yet returned.
    var pendingByteCount: Int { Int(SSL_pending(ssl)) }

    /// Opens received records into `destination` (OpenSSL reads them through the engine's BIO).
    func read(into destination: UnsafeMutableRawBufferPointer) throws(SecurityError) -> TLSEngine.ReadStatus {
        if let failure { throw failure }
        OpenSSLErrors.clear()  // else another caller's error turns wouldBlock or close into a failure
        let limit = TLSRecordLayer.maximumRecordsWithoutData
        while true {
            var read = 0
            let opened = SSL_read_ex(ssl, destination.baseAddress, destination.count, &read) == 1
            guard messagesWithoutData <= limit, requestsWithoutWrite <= limit else {
                let what = messagesWithoutData > limit
                    ? "KeyUpdates or session tickets in a row without application data" : "KeyUpdate requests while this side wrote nothing"
                throw fail(SecurityError(.tlsFailure, "more than \(limit) \(what)"))
            }
            if opened {
                messagesWithoutData = 0
                return .bytes(read)
            }
            switch SSL_get_error(ssl, 0) {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                // A record without data was read; the next may be waiting already. Each pass
                // takes bytes from the engine, so this ends.
                if hasBufferedInput() { continue }
                return .wouldBlock
            case SSL_ERROR_ZERO_RETURN:
                return .closed
            default:
                throw fail(SecurityError.openSSL(.tlsFailure, "TLS read failed"))
            }
        }
    }

    /// Queues close_notify, once, unless something failed.
    func sealCloseNotify() {
        guard !closeNotifySent, failure == nil else { return }
        closeNotifySent = true
        _ = SSL_shutdown(ssl)
        OpenSSLErrors.clear()
    }

    private func fail(_ error: SecurityError) -> SecurityError {
        failure = error
        return error
    }

    fileprivate func noteKeyUpdate(sent: Bool, requesting: Bool) {
        if sent {
            keyUpdatesSent += 1
            recordsSinceKeyUpdate = 0  // an answer to the peer renews this side's key too
        } else {
            keyUpdatesReceived += 1
            messagesWithoutData += 1
            if requesting { requestsWithoutWrite += 1 }
        }
    }

    fileprivate func noteTicketReceived() {
        messagesWithoutData += 1
    }
}

/// Counts KeyUpdate messages both ways, and session tickets received, as the library's layer does.
private func noteKeyUpdates(
    _ writeP: Int32, _ version: Int32, _ contentType: Int32, _ buffer: UnsafeRawPointer?, _ length: Int,
    _ ssl: OpaquePointer?, _ argument: UnsafeMutableRawPointer?
) {
    guard contentType == SSL3_RT_HANDSHAKE, length > 0, let buffer, let argument else { return }
    let layer = Unmanaged<OpenSSLRecordLayer>.fromOpaque(argument).takeUnretainedValue()
    switch buffer.load(as: UInt8.self) {
    case UInt8(SSL3_MT_KEY_UPDATE):
        // Type, 3-byte length, then request_update (RFC 8446 §4.6.3).
        let requesting = length >= 5 && buffer.load(fromByteOffset: 4, as: UInt8.self) == 1
        layer.noteKeyUpdate(sent: writeP == 1, requesting: requesting)
    case UInt8(SSL3_MT_NEWSESSION_TICKET) where writeP == 0:
        layer.noteTicketReceived()
    default:
        break
    }
}
