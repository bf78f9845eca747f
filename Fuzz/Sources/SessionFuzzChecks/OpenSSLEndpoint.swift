import CMultipeerOpenSSL
import CMultipeerShims
import MultipeerCrypto

/// What OpenSSL reports of the records one endpoint reads, through its message callback.
final class OpenSSLObserver {
    /// Records it decrypted (OpenSSL reports each one's inner content type).
    var recordsOpened = 0
    /// The request_update byte of each KeyUpdate it read, in order.
    var keyUpdatesRead: [UInt8] = []
    /// The description of the last alert it read.
    var lastAlertRead: UInt8?

    /// Forgets the handshake's records.
    func reset() {
        recordsOpened = 0
        keyUpdatesRead = []
        lastAlertRead = nil
    }
}

private let observeMessage: @convention(c) (Int32, Int32, Int32, UnsafeRawPointer?, Int, OpaquePointer?, UnsafeMutableRawPointer?) -> Void = {
    written, _, contentType, buffer, length, _, argument in
    guard written == 0, let buffer, let argument else { return }
    let observer = Unmanaged<OpenSSLObserver>.fromOpaque(argument).takeUnretainedValue()
    let bytes = UnsafeRawBufferPointer(start: buffer, count: length)
    switch contentType {
    case SSL3_RT_INNER_CONTENT_TYPE: observer.recordsOpened += 1
    case SSL3_RT_HANDSHAKE where length == 5 && bytes[0] == 24: observer.keyUpdatesRead.append(bytes[4])
    case SSL3_RT_ALERT where length == 2: observer.lastAlertRead = bytes[1]
    default: break
    }
}

/// One OpenSSL endpoint on memory BIOs, protecting records with OpenSSL's own record layer.
final class OpenSSLEndpoint {
    enum ReadState: String { case open, closed, failed }
    enum WriteOutcome { case accepted, wouldBlock, refused }

    let ssl: OpaquePointer
    /// Ciphertext for the SSL to read, and ciphertext it wrote.
    private let input: OpaquePointer
    private let output: OpaquePointer
    let observer = OpenSSLObserver()
    /// Set once any call failed for good; OpenSSL's own state says "in init" then too.
    private(set) var failed = false
    /// The key-log capture the SSL's ex-data points at: OpenSSL logs every KeyUpdate's secret
    /// too, so it lives as long as the SSL.
    var keyLog: TLSTrafficSecretCapture?

    init(context: OpaquePointer, isClient: Bool) {
        guard let ssl = SSL_new(context), let input = BIO_new(BIO_s_mem()), let output = BIO_new(BIO_s_mem()) else {
            fatalError("OpenSSL endpoint set-up failed")
        }
        self.ssl = ssl
        self.input = input
        self.output = output
        SSL_set_bio(ssl, input, output)  // the SSL owns both BIOs now
        if isClient { SSL_set_connect_state(ssl) } else { SSL_set_accept_state(ssl) }
        SSL_set_msg_callback(ssl, observeMessage)
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, Unmanaged.passUnretained(observer).toOpaque())
    }

    deinit { SSL_free(ssl) }

    func receive(_ bytes: ArraySlice<UInt8>) {
        guard !bytes.isEmpty else { return }
        let written = bytes.withUnsafeBytes { BIO_write(input, $0.baseAddress, Int32($0.count)) }
        precondition(Int(written) == bytes.count, "a memory BIO refused bytes")
    }

    /// Everything the SSL wrote since the last call.
    func takeOutput() -> [UInt8] {
        let pending = Int(BIO_ctrl_pending(output))
        guard pending > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = BIO_read(output, &bytes, Int32(pending))
        precondition(Int(read) == pending, "a memory BIO held back bytes")
        return bytes
    }

    /// Bytes received and not yet taken by the SSL.
    var unreadInput: Int { Int(BIO_ctrl_pending(input)) }

    /// In the middle of a post-handshake message (or failed): OpenSSL reads its rest before it writes.
    var isInInit: Bool { SSL_in_init(ssl) != 0 }

    /// One step of the handshake: true once it is complete.
    func handshake() -> Bool {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return true }
        let error = SSL_get_error(ssl, result)
        ERR_clear_error()
        precondition(error == SSL_ERROR_WANT_READ, "the OpenSSL handshake failed: \(error)")
        return false
    }

    /// SSL_read with `capacity` bytes until OpenSSL says it would block, closed or failed.
    func read(capacity: Int, into data: inout [UInt8]) -> ReadState {
        // After a fatal alert OpenSSL's later reads say "closed": a failure is kept here.
        guard !failed else { return .failed }
        var buffer = [UInt8](repeating: 0, count: capacity)
        var retries = 0
        while true {
            ERR_clear_error()
            var count = 0
            let before = progress
            if SSL_read_ex(ssl, &buffer, capacity, &count) == 1 {
                precondition(count > 0 && count <= capacity, "SSL_read of \(count) bytes into \(capacity)")
                data += buffer[..<count]
                continue
            }
            let state = state(after: SSL_get_error(ssl, 0))
            // OpenSSL can stop with part of a record unread (the start of a handshake message
            // after a KeyUpdate it answered); a reader calls again while that makes progress.
            if state == .open && progress != before && retries < 8 {
                retries += 1
                continue
            }
            return state
        }
    }

    /// What a read can have done: records opened, KeyUpdates read, input taken, a message begun.
    private var progress: [Int] {
        [observer.recordsOpened, observer.keyUpdatesRead.count, unreadInput, isInInit ? 1 : 0]
    }

    /// SSL_write of one record's worth.
    func write(_ content: [UInt8]) -> WriteOutcome {
        // After close_notify OpenSSL refuses writes without failing.
        guard !failed, SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN == 0 else { return .refused }
        ERR_clear_error()
        var written = 0
        if SSL_write_ex(ssl, content, content.count, &written) == 1 {
            precondition(written == content.count, "a partial SSL_write")
            return .accepted
        }
        return writeOutcome(SSL_get_error(ssl, 0))
    }

    /// SSL_key_update asking the peer to update too; sent before the next write.
    func requestKeyUpdate() -> WriteOutcome {
        guard !failed else { return .refused }
        guard !isInInit else { return .wouldBlock }
        ERR_clear_error()
        let accepted = SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1
        ERR_clear_error()
        return accepted ? .accepted : .refused
    }

    /// SSL_shutdown: close_notify, once (called again, it would read on for the peer's).
    /// OpenSSL refuses it in the middle of a handshake message.
    func closeNotify() -> WriteOutcome {
        guard !failed, SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN == 0 else { return .refused }
        guard !isInInit else { return .wouldBlock }
        ERR_clear_error()
        let result = SSL_shutdown(ssl)
        ERR_clear_error()
        return result >= 0 ? .accepted : .refused
    }

    /// A refused write fails the connection when OpenSSL says SSL_ERROR_SSL (having read the rest
    /// of a handshake message first, it can also find the peer's close_notify there).
    private func writeOutcome(_ error: Int32) -> WriteOutcome {
        ERR_clear_error()
        switch error {
        case SSL_ERROR_WANT_READ: return .wouldBlock
        case SSL_ERROR_SSL:
            failed = true
            return .refused
        default: return .refused
        }
    }

    /// What SSL_get_error says of the last call, with the thread's error queue emptied.
    private func state(after error: Int32) -> ReadState {
        ERR_clear_error()
        switch error {
        case SSL_ERROR_WANT_READ: return .open
        case SSL_ERROR_ZERO_RETURN: return .closed
        // A close_notify not of level warning after a user_canceled: OpenSSL took it (it keeps
        // the last warning alert's description for SSL_get_error, so it says SYSCALL).
        case SSL_ERROR_SYSCALL where SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN != 0 && observer.lastAlertRead == 0:
            return .closed
        default:
            failed = true
            return .failed
        }
    }
}

/// Two OpenSSL endpoints after a TLS 1.3 handshake with each other over memory BIOs, and the
/// application traffic secrets the library's key-log capture took from it.
struct OpenSSLHandshake {
    let client: OpenSSLEndpoint
    let server: OpenSSLEndpoint
    let clientSecret: SecureBytes
    let serverSecret: SecureBytes

    init(suite: TLSCipherSuite) {
        let contexts = DifferentialContexts.shared
        client = OpenSSLEndpoint(context: contexts.client, isClient: true)
        server = OpenSSLEndpoint(context: contexts.server, isClient: false)
        guard SSL_set_ciphersuites(client.ssl, suite.openSSLName) == 1 else { fatalError("cipher suite \(suite)") }
        let capture = TLSTrafficSecretCapture()
        do { try capture.attach(to: client.ssl) } catch { fatalError("key-log capture: \(error)") }
        client.keyLog = capture
        var done = (client: false, server: false)
        for _ in 0..<8 where !(done.client && done.server) {
            if !done.client { done.client = client.handshake() }
            server.receive(client.takeOutput()[...])
            if !done.server { done.server = server.handshake() }
            client.receive(server.takeOutput()[...])
        }
        precondition(done.client && done.server, "the OpenSSL handshake did not finish")
        // No session tickets: neither side has sealed or read a record under the traffic keys.
        precondition(client.unreadInput == 0 && server.unreadInput == 0 && client.takeOutput().isEmpty && server.takeOutput().isEmpty)
        client.observer.reset()
        server.observer.reset()
        guard let clientSecret = capture.client, let serverSecret = capture.server else { fatalError("no traffic secrets captured") }
        self.clientSecret = clientSecret
        self.serverSecret = serverSecret
        capture.clear()
    }
}


/// The two OpenSSL contexts, made once: TLS 1.3 only, X25519, no tickets or session cache, and
/// the library's key-log callback. The server presents a fixed Ed25519 key in a fixed
/// self-signed certificate; the client checks nothing (the record layer is what is under test).
final class DifferentialContexts: @unchecked Sendable {
    // @unchecked: configured in init, only read (SSL_new) afterwards.
    let client: OpaquePointer
    let server: OpaquePointer

    static let shared = DifferentialContexts()

    private init() {
        client = Self.context()
        server = Self.context()
        guard let key = Self.fixedKey(), let certificate = Self.certificate(for: key),
            SSL_CTX_use_certificate(server, certificate) == 1, SSL_CTX_use_PrivateKey(server, key) == 1
        else { fatalError("differential server identity") }
        X509_free(certificate)
        EVP_PKEY_free(key)
    }

    private static func context() -> OpaquePointer {
        guard let context = SSL_CTX_new(TLS_method()),
            mp_SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION) == 1,
            mp_SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION) == 1,
            mp_SSL_CTX_set1_groups_list(context, "X25519") == 1,
            SSL_CTX_set_num_tickets(context, 0) == 1
        else { fatalError("differential OpenSSL context") }
        _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_SESS_CACHE_MODE, Int(SSL_SESS_CACHE_OFF), nil)
        SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        SSL_CTX_set_keylog_callback(context, captureTrafficSecret)
        return context
    }

    private static func fixedKey() -> OpaquePointer? {
        let seed = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        return EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, seed.count)
    }

    private static func certificate(for key: OpaquePointer) -> OpaquePointer? {
        guard let certificate = X509_new() else { return nil }
        let name = X509_get_subject_name(certificate)
        let commonName = Array("fuzz-tls-differential".utf8)
        guard X509_set_version(certificate, 2) == 1, ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1) == 1,
            ASN1_TIME_set_string(X509_getm_notBefore(certificate), "20250101000000Z") == 1,
            ASN1_TIME_set_string(X509_getm_notAfter(certificate), "20991231235959Z") == 1,
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, Int32(commonName.count), -1, 0) == 1,
            X509_set_issuer_name(certificate, name) == 1, X509_set_pubkey(certificate, key) == 1,
            X509_sign(certificate, key, nil) > 0
        else {
            X509_free(certificate)
            return nil
        }
        return certificate
    }
}
