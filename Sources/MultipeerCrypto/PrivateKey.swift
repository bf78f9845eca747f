import CMultipeerOpenSSL
import Foundation

/// The public-key algorithms identities may use.
public enum KeyAlgorithm: Hashable, Sendable, CustomStringConvertible {
    case ed25519
    case ecdsaP256
    case rsa(bits: Int)

    /// Smallest RSA modulus accepted.
    public static let minimumRSABits = 2048

    init?(_ key: OpaquePointer) {
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_ED25519:
            self = .ed25519
        case EVP_PKEY_EC:
            guard EVP_PKEY_get_bits(key) == 256, Self.curveName(key) == "prime256v1" else { return nil }
            self = .ecdsaP256
        case EVP_PKEY_RSA:
            self = .rsa(bits: Int(EVP_PKEY_get_bits(key)))
        default:
            return nil
        }
    }

    /// Whether keys of this kind may back an identity.
    public var isAcceptable: Bool {
        if case .rsa(let bits) = self { return bits >= Self.minimumRSABits }
        return true
    }

    public var description: String {
        switch self {
        case .ed25519: "Ed25519"
        case .ecdsaP256: "ECDSA P-256"
        case .rsa(let bits): "RSA \(bits)"
        }
    }

    private static func curveName(_ key: OpaquePointer) -> String? {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(key, "group", &name, name.count, &length) == 1 else { return nil }
        return String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A private key (Ed25519, ECDSA P-256 or RSA ≥ 2048). OpenSSL zeroes its key memory when freed.
public final class PrivateKey: @unchecked Sendable {
    // @unchecked: the EVP_PKEY is never mutated after init.
    let pkey: OpaquePointer
    public let algorithm: KeyAlgorithm

    init(taking pkey: OpaquePointer) throws(SecurityError) {
        guard let algorithm = KeyAlgorithm(pkey), algorithm.isAcceptable else {
            EVP_PKEY_free(pkey)
            throw SecurityError(.unsupportedKeyType, "only Ed25519, ECDSA P-256 and RSA of 2048 bits or more")
        }
        self.pkey = pkey
        self.algorithm = algorithm
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Generates a fresh key. RSA sizes below 2048 bits are refused.
    public static func generate(_ algorithm: KeyAlgorithm = .ed25519) throws(SecurityError) -> PrivateKey {
        let context: OpaquePointer?
        switch algorithm {
        case .ed25519: context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil)
        case .ecdsaP256: context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        case .rsa(let bits):
            guard bits >= KeyAlgorithm.minimumRSABits, bits <= 16_384 else {
                throw SecurityError(.unsupportedKeyType, "RSA keys of \(bits) bits")
            }
            context = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil)
        }
        guard let context else { throw SecurityError.openSSL(.internalError, "EVP_PKEY_CTX_new_id failed") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw SecurityError.openSSL(.internalError, "keygen init failed") }
        switch algorithm {
        case .ed25519: break
        case .ecdsaP256:
            guard EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1 else {
                throw SecurityError.openSSL(.internalError, "P-256 parameters")
            }
        case .rsa(let bits):
            guard EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1 else {
                throw SecurityError.openSSL(.internalError, "RSA parameters")
            }
        }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen(context, &key) == 1, let key else {
            throw SecurityError.openSSL(.internalError, "key generation failed")
        }
        return try PrivateKey(taking: key)
    }

    /// Reads a PEM private key (PKCS#8, traditional or encrypted). A nil passphrase on an encrypted
    /// key, or the wrong one, is `wrongPassword`.
    public convenience init(pemEncoded pem: String, passphrase: String? = nil) throws(SecurityError) {
        let key = try OpenSSLBIO.withReadBIO(Array(pem.utf8)) { bio throws(SecurityError) -> OpaquePointer in
            OpenSSLErrors.clear()
            // With a nil callback, OpenSSL takes `u` as the NUL-terminated passphrase; an empty one
            // stands in for "none" so that an encrypted key fails instead of prompting on a terminal.
            let parsed = (passphrase ?? "").withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
            guard let parsed else {
                if OpenSSLErrors.lastIsBadPassword() || pem.contains("ENCRYPTED") {
                    throw SecurityError.openSSL(.wrongPassword, "the passphrase does not decrypt the private key")
                }
                throw SecurityError.openSSL(.malformedData, "not a PEM private key")
            }
            return parsed
        }
        try self.init(taking: key)
    }

    /// PEM (PKCS#8); encrypted with AES-256-CBC under `passphrase` when one is given.
    public func pemEncoded(passphrase: String? = nil) throws(SecurityError) -> String {
        try OpenSSLBIO.string { bio in
            guard let passphrase else {
                return PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1
            }
            return passphrase.withCString { phrase in
                PEM_write_bio_PKCS8PrivateKey(bio, pkey, EVP_aes_256_cbc(), nil, 0, nil, UnsafeMutableRawPointer(mutating: phrase)) == 1
            }
        }
    }

    /// Whether this key belongs to `certificate`.
    public func matches(_ certificate: Certificate) -> Bool {
        let result = X509_check_private_key(certificate.x509, pkey) == 1
        OpenSSLErrors.clear()
        return result
    }
}
