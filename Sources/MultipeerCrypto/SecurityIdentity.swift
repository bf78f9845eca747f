import CMultipeerOpenSSL
import CMultipeerShims
import Foundation

/// A private key with its certificate and the intermediates above it, leaf first.
public final class SecurityIdentity: @unchecked Sendable {
    // @unchecked: immutable after init; the wrapped OpenSSL objects are never mutated.
    public let privateKey: PrivateKey
    /// Leaf first, then intermediates in order; never the root.
    public let certificateChain: [Certificate]

    public var certificate: Certificate { certificateChain[0] }

    public init(privateKey: PrivateKey, certificateChain: [Certificate]) throws(SecurityError) {
        guard let leaf = certificateChain.first else {
            throw SecurityError(.invalidArgument, "an identity needs at least its own certificate")
        }
        guard privateKey.matches(leaf) else {
            throw SecurityError(.keyMismatch, "the private key does not belong to the certificate")
        }
        guard let algorithm = leaf.publicKeyAlgorithm, algorithm.isAcceptable else {
            throw SecurityError(.unsupportedKeyType, "only Ed25519, ECDSA P-256 and RSA of 2048 bits or more")
        }
        self.privateKey = privateKey
        self.certificateChain = certificateChain
    }

    /// A certificate chain and a private key in PEM; `passphrase` opens an encrypted key.
    public convenience init(certificateChainPEM: String, privateKeyPEM: String, passphrase: String? = nil) throws(SecurityError) {
        let chain = try Certificate.chain(pemEncoded: certificateChainPEM)
        try self.init(privateKey: try PrivateKey(pemEncoded: privateKeyPEM, passphrase: passphrase), certificateChain: chain)
    }

    /// Reads PEM files; either file may also hold both parts.
    public convenience init(certificateChainFile: String, privateKeyFile: String, passphrase: String? = nil) throws(SecurityError) {
        try self.init(
            certificateChainPEM: try Self.readText(certificateChainFile),
            privateKeyPEM: try Self.readText(privateKeyFile),
            passphrase: passphrase)
    }

    /// Opens a password-protected PKCS#12 container.
    public convenience init(pkcs12: [UInt8], password: String) throws(SecurityError) {
        OpenSSLErrors.clear()
        let container: OpaquePointer? = pkcs12.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_PKCS12(nil, &cursor, buffer.count)
        }
        guard let container else { throw SecurityError.openSSL(.malformedData, "not a PKCS#12 container") }
        defer { PKCS12_free(container) }
        guard PKCS12_verify_mac(container, password, -1) == 1 else {
            throw SecurityError.openSSL(.wrongPassword, "the password does not open the PKCS#12 container")
        }
        var key: OpaquePointer?
        var leaf: OpaquePointer?
        var extra: OpaquePointer?
        guard PKCS12_parse(container, password, &key, &leaf, &extra) == 1, let key, let leaf else {
            throw SecurityError.openSSL(.malformedData, "the PKCS#12 container holds no key and certificate")
        }
        defer { if let extra { mp_sk_X509_pop_free(extra) } }
        var chain = [Certificate(taking: leaf)]
        if let extra {
            for index in 0..<mp_sk_X509_num(extra) {
                if let x509 = mp_sk_X509_value(extra, index) { chain.append(Certificate(retaining: x509)) }
            }
        }
        try self.init(privateKey: try PrivateKey(taking: key), certificateChain: Self.ordered(chain))
    }

    public convenience init(pkcs12File: String, password: String) throws(SecurityError) {
        try self.init(pkcs12: try Self.readBytes(pkcs12File), password: password)
    }

    /// A password-protected PKCS#12 container (AES-256 and PBKDF2, OpenSSL 3's defaults).
    public func pkcs12(password: String, friendlyName: String? = nil) throws(SecurityError) -> [UInt8] {
        guard let extra = mp_sk_X509_new_null() else { throw SecurityError.openSSL(.internalError, "stack") }
        defer { mp_sk_X509_free(extra) }
        for certificate in certificateChain.dropFirst() { _ = mp_sk_X509_push(extra, certificate.x509) }
        guard let container = PKCS12_create(password, friendlyName, privateKey.pkey, certificate.x509, extra, 0, 0, 0, 0, 0) else {
            throw SecurityError.openSSL(.internalError, "PKCS12_create failed")
        }
        defer { PKCS12_free(container) }
        let length = i2d_PKCS12(container, nil)
        guard length > 0 else { throw SecurityError.openSSL(.internalError, "PKCS#12 encoding") }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_PKCS12(container, &cursor)
        }
        return bytes
    }

    /// The chain as concatenated PEM, leaf first.
    public var certificateChainPEM: String { certificateChain.map(\.pemEncoded).joined() }

    /// A fresh Ed25519 key with a self-signed certificate: what a TLS server without an identity shows.
    public static func ephemeral() throws(SecurityError) -> SecurityIdentity {
        let key = try PrivateKey.generate(.ed25519)
        let certificate = try CertificateBuilder(
            commonName: "ephemeral", notValidBefore: Date(timeIntervalSinceNow: -60),
            notValidAfter: Date(timeIntervalSinceNow: 86_400)
        ).issue(for: key)
        return try SecurityIdentity(privateKey: key, certificateChain: [certificate])
    }

    /// PKCS#12 does not promise an order for the extra certificates: put each issuer after its subject.
    private static func ordered(_ certificates: [Certificate]) -> [Certificate] {
        guard var current = certificates.first else { return certificates }
        var remaining = Array(certificates.dropFirst())
        var chain = [current]
        while let index = remaining.firstIndex(where: { $0.subject == current.issuer && $0 != current }) {
            current = remaining.remove(at: index)
            chain.append(current)
        }
        return chain + remaining
    }

    private static func readBytes(_ path: String) throws(SecurityError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SecurityError(.unreadableFile, "cannot read \(path)")
        }
        return [UInt8](data)
    }

    private static func readText(_ path: String) throws(SecurityError) -> String {
        String(decoding: try readBytes(path), as: UTF8.self)
    }
}
