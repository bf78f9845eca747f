import CMultipeerOpenSSL
import CMultipeerShims
import MultipeerWire

/// OpenSSL contexts for one session: TLS 1.3 only, hybrid X25519MLKEM768 key exchange where the
/// linked OpenSSL has it (3.5 and later) and X25519 or P-256 otherwise, security level 2,
/// ALPN `mpcp/1`, no tickets (so no record is sealed under the traffic keys before the engine takes
/// them over), and certificate chains accepted at the TLS layer because the trust
/// decision is the application's, after the handshake (docs/PROTOCOL.md §5, §7.3). TLS itself
/// still proves possession of the leaf's key, which must meet the security level.
public final class TLSContext: @unchecked Sendable {
    // @unchecked: both SSL_CTX are fully configured in init and only read afterwards.
    /// Presents the identity, or an ephemeral certificate when there is none.
    let server: OpaquePointer
    /// Presents the identity when there is one, and no certificate otherwise.
    let client: OpaquePointer
    public let identity: SecurityIdentity?

    static let alpnWire: [UInt8] = [UInt8(WireLimits.alpnProtocol.utf8.count)] + Array(WireLimits.alpnProtocol.utf8)

    /// Only elliptic-curve key exchange, hybrid with ML-KEM where available: a ClientHello
    /// offering a finite-field group alone would cost the listener a large modular
    /// exponentiation (~117 ms for ffdhe8192). With X25519MLKEM768, key shares go for it and for
    /// X25519 (the `*`s), so a peer without ML-KEM answers at once, with no HelloRetryRequest.
    /// Each group is a tuple of its own (the `/`s): OpenSSL 3.5 servers pick by tuple order,
    /// so the listener keeps §5's order of preference rather than taking the client's.
    static let postQuantumGroups = "*X25519MLKEM768/*X25519/P-256"
    /// What an OpenSSL without ML-KEM (3.0) is given; it also rejects the `*` syntax.
    static let classicalGroups = "X25519:P-256"

    /// Whether the linked OpenSSL offers hybrid post-quantum key exchange.
    public static let offersPostQuantumKeyExchange: Bool = {
        guard let context = SSL_CTX_new(TLS_method()) else { return false }
        defer { SSL_CTX_free(context) }
        let offered = mp_SSL_CTX_set1_groups_list(context, postQuantumGroups) == 1
        ERR_clear_error()  // 3.0's complaint about the list it does not know
        return offered
    }()

    static var groups: String { offersPostQuantumKeyExchange ? postQuantumGroups : classicalGroups }

    /// OpenSSL level 2 (112-bit security), set here because distributions build in different
    /// defaults. Trust evaluation uses the same level.
    static let securityLevel: Int32 = 2
    /// The smallest peer leaf key level 2 allows: RSA 2048, while Ed25519 and P-256 give 128.
    static let minimumKeySecurityBits: Int32 = 112

    public init(identity: SecurityIdentity?) throws(SecurityError) {
        try CryptoRuntime.ensureInitializedForTLS()
        self.identity = identity
        let serverIdentity: SecurityIdentity
        if let identity { serverIdentity = identity } else { serverIdentity = try .ephemeral() }
        let serverContext = try Self.makeContext(presenting: serverIdentity)
        do {
            client = try Self.makeContext(presenting: identity)
        } catch {
            SSL_CTX_free(serverContext)
            throw error
        }
        server = serverContext
        SSL_CTX_set_alpn_select_cb(server, selectALPN, nil)
    }

    deinit {
        SSL_CTX_free(server)
        SSL_CTX_free(client)
    }

    private static func makeContext(presenting identity: SecurityIdentity?) throws(SecurityError) -> OpaquePointer {
        guard let context = SSL_CTX_new(TLS_method()) else { throw SecurityError.openSSL(.internalError, "SSL_CTX_new failed") }
        SSL_CTX_set_security_level(context, securityLevel)  // before the certificate, which it checks
        var ok = mp_SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION) == 1
            && mp_SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION) == 1
            && SSL_CTX_set_ciphersuites(context, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") == 1
            && mp_SSL_CTX_set1_groups_list(context, groups) == 1
            && SSL_CTX_set_num_tickets(context, 0) == 1
        // No resumption at all: a resumed handshake carries no certificate to judge (§5).
        _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_SESS_CACHE_MODE, Int(SSL_SESS_CACHE_OFF), nil)
        if ok, let identity {
            ok = SSL_CTX_use_certificate(context, identity.certificate.x509) == 1
                && SSL_CTX_use_PrivateKey(context, identity.privateKey.pkey) == 1
                && identity.certificateChain.dropFirst().allSatisfy { mp_SSL_CTX_add1_chain_cert(context, $0.x509) == 1 }
                && SSL_CTX_check_private_key(context) == 1
        }
        guard ok else {
            SSL_CTX_free(context)
            throw SecurityError.openSSL(.internalError, "TLS context configuration failed")
        }
        // Request the peer's certificate without failing when there is none; accept any chain here,
        // but not a weak leaf key.
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        SSL_CTX_set_cert_verify_callback(context, acceptChainWithStrongLeafKey, nil)
        // The engine protects application records itself, with the traffic secrets this hands it.
        SSL_CTX_set_keylog_callback(context, captureTrafficSecret)
        return context
    }
}

/// Replaces OpenSSL's chain verification, and with it the security level's key-size check, which
/// is therefore made here for the leaf: TLS proves possession of that key, so it must be strong.
/// The rest of the chain is the application's to judge (TrustEvaluation applies the same level).
private func acceptChainWithStrongLeafKey(_ store: OpaquePointer?, _ argument: UnsafeMutableRawPointer?) -> Int32 {
    guard let store, let leaf = X509_STORE_CTX_get0_cert(store), let key = X509_get0_pubkey(leaf) else { return 0 }
    guard EVP_PKEY_get_security_bits(key) >= TLSContext.minimumKeySecurityBits else {
        X509_STORE_CTX_set_error(store, X509_V_ERR_EE_KEY_TOO_SMALL)
        return 0
    }
    return 1
}

/// The server selects `mpcp/1` or fails the handshake.
private func selectALPN(
    _ ssl: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, _ outLength: UnsafeMutablePointer<UInt8>?,
    _ offered: UnsafePointer<UInt8>?, _ offeredLength: UInt32, _ argument: UnsafeMutableRawPointer?
) -> Int32 {
    guard let offered, let out, let outLength else { return SSL_TLSEXT_ERR_ALERT_FATAL }
    let wanted = TLSContext.alpnWire
    var index = 0
    let total = Int(offeredLength)
    while index < total {
        let length = Int(offered[index])
        guard index + 1 + length <= total else { break }
        if length + 1 == wanted.count && (0..<length).allSatisfy({ offered[index + 1 + $0] == wanted[1 + $0] }) {
            out.pointee = offered + index + 1
            outLength.pointee = UInt8(length)
            return SSL_TLSEXT_ERR_OK
        }
        index += 1 + length
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL
}
