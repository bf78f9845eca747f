import CMultipeerOpenSSL
import CMultipeerShims
import Foundation

/// An X.509 certificate, as apps see it in the trust callback.
public final class Certificate: Hashable, @unchecked Sendable, CustomStringConvertible {
    // @unchecked: the X509 is never mutated after init, and OpenSSL 3 reads it thread-safely.
    let x509: OpaquePointer

    /// Takes ownership of one reference to `x509`.
    init(taking x509: OpaquePointer) {
        self.x509 = x509
    }

    /// Adds a reference to `x509` and wraps it.
    init(retaining x509: OpaquePointer) {
        X509_up_ref(x509)
        self.x509 = x509
    }

    deinit { X509_free(x509) }

    /// Parses one DER-encoded certificate.
    public convenience init(derEncoded der: [UInt8]) throws(SecurityError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw SecurityError.openSSL(.malformedData, "not a DER certificate") }
        self.init(taking: parsed)
    }

    /// Parses the first PEM certificate in `pem`.
    public convenience init(pemEncoded pem: String) throws(SecurityError) {
        guard let first = try Certificate.chain(pemEncoded: pem).first else {
            throw SecurityError(.malformedData, "no PEM certificate found")
        }
        self.init(retaining: first.x509)
    }

    /// Parses every PEM certificate in `pem`, in order.
    public static func chain(pemEncoded pem: String) throws(SecurityError) -> [Certificate] {
        try OpenSSLBIO.withReadBIO(Array(pem.utf8)) { bio throws(SecurityError) in
            var certificates: [Certificate] = []
            OpenSSLErrors.clear()
            while let x509 = PEM_read_bio_X509(bio, nil, nil, nil) {
                certificates.append(Certificate(taking: x509))
            }
            // Reaching the end of the input leaves a "no start line" error; anything else is malformed.
            let error = ERR_peek_last_error()
            let isEndOfInput = Int32((error >> 23) & 0xFF) == ERR_LIB_PEM && Int32(error & 0x7FFFFF) == PEM_R_NO_START_LINE
            guard error == 0 || isEndOfInput else { throw SecurityError.openSSL(.malformedData, "bad PEM certificate") }
            OpenSSLErrors.clear()
            return certificates
        }
    }

    public var derEncoded: [UInt8] {
        let length = i2d_X509(x509, nil)
        guard length > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_X509(x509, &cursor)
        }
        return bytes
    }

    public var pemEncoded: String {
        (try? OpenSSLBIO.string { PEM_write_bio_X509($0, x509) == 1 }) ?? ""
    }

    /// SHA-256 of the DER encoding.
    public var sha256Fingerprint: [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = X509_digest(x509, FetchedAlgorithms.sha256, &digest, &length)
        return digest
    }

    /// The fingerprint as colon-separated upper-case hex, as `openssl x509 -fingerprint` prints it.
    /// The fingerprint, or nil when OpenSSL could not compute it (where `sha256Fingerprint`
    /// would give zeros): for keys that must never collide.
    package var checkedSHA256Fingerprint: [UInt8]? {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        guard X509_digest(x509, FetchedAlgorithms.sha256, &digest, &length) == 1, length == 32 else {
            OpenSSLErrors.clear()
            return nil
        }
        return digest
    }

    public var sha256FingerprintText: String {
        sha256Fingerprint.map { String(format: "%02X", $0) }.joined(separator: ":")
    }

    /// The subject in RFC 2253 form, for example "CN=alice,O=Example".
    public var subject: String { Self.describe(X509_get_subject_name(x509)) }
    public var issuer: String { Self.describe(X509_get_issuer_name(x509)) }
    /// The subject's common name; nil when it has none, more than one (which one a reader takes
    /// differs between implementations, so none is right), or one that is not text.
    public var subjectCommonName: String? { Self.onlyName(Self.commonNames(X509_get_subject_name(x509))) }
    public var issuerCommonName: String? { Self.onlyName(Self.commonNames(X509_get_issuer_name(x509))) }
    /// Every common name in the subject, in order; one that is not text appears as U+FFFD.
    public var subjectCommonNames: [String] { Self.commonNames(X509_get_subject_name(x509)).map { $0 ?? "\u{FFFD}" } }
    public var issuerCommonNames: [String] { Self.commonNames(X509_get_issuer_name(x509)).map { $0 ?? "\u{FFFD}" } }

    /// The serial number in upper-case hex.
    public var serialNumberHex: String {
        guard let bignum = ASN1_INTEGER_to_BN(X509_get_serialNumber(x509), nil) else { return "" }
        defer { BN_free(bignum) }
        guard let text = BN_bn2hex(bignum) else { return "" }
        defer { mp_OPENSSL_free(text) }
        return String(cString: text)
    }

    public var notValidBefore: Date { Self.date(X509_get0_notBefore(x509)) }
    public var notValidAfter: Date { Self.date(X509_get0_notAfter(x509)) }

    /// Whether OpenSSL accepts this certificate as the issuer of others (`X509_check_ca`).
    public var isCertificateAuthority: Bool { X509_check_ca(x509) > 0 }

    /// Whether this is an end entity, as a peer identity must be: not a usable CA, and no
    /// basicConstraints `CA:TRUE` either. A CA:TRUE certificate whose keyUsage forbids signing
    /// certificates is no usable CA to OpenSSL, yet a CA certificate to RFC 5280 and to other
    /// verifiers.
    public var isEndEntity: Bool {
        !isCertificateAuthority && X509_get_extension_flags(x509) & UInt32(EXFLAG_CA) == 0
    }

    public var publicKeyAlgorithm: KeyAlgorithm? {
        guard let key = X509_get0_pubkey(x509) else { return nil }
        return KeyAlgorithm(key)
    }

    public var description: String {
        "Certificate(subject: \(subject), issuer: \(issuer), sha256: \(sha256FingerprintText))"
    }

    public static func == (lhs: Certificate, rhs: Certificate) -> Bool {
        X509_cmp(lhs.x509, rhs.x509) == 0
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(sha256Fingerprint)
    }

    private static func describe(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        return (try? OpenSSLBIO.string { X509_NAME_print_ex($0, name, 0, mp_XN_FLAG_RFC2253_UTF8()) >= 0 }) ?? ""
    }

    private static func onlyName(_ names: [String?]) -> String? {
        names.count == 1 ? names[0] : nil
    }

    /// Every common name entry, in order (multi-valued RDNs included); nil for one that is not text.
    private static func commonNames(_ name: OpaquePointer?) -> [String?] {
        guard let name else { return [] }
        var names: [String?] = []
        var index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        while index >= 0 {
            names.append(text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index))))
            index = X509_NAME_get_index_by_NID(name, NID_commonName, index)
        }
        return names
    }

    private static func text(_ data: UnsafeMutablePointer<ASN1_STRING>?) -> String? {
        guard let data else { return nil }
        var utf8: UnsafeMutablePointer<UInt8>?
        let length = ASN1_STRING_to_UTF8(&utf8, data)
        guard length >= 0, let utf8 else { return nil }
        defer { mp_OPENSSL_free(utf8) }
        return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else { return .distantPast }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }
}
