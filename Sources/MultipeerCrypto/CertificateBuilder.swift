import CMultipeerOpenSSL
import Foundation

/// Issues X.509 v3 certificates: CAs, intermediates, peer identities and self-signed ones.
public struct CertificateBuilder: Sendable {
    public enum Role: Sendable {
        /// A CA; `pathLength` limits the CAs below it (nil: unlimited).
        case certificateAuthority(pathLength: Int?)
        /// An end entity that authenticates in TLS as client and server.
        case peer
    }

    public var commonName: String
    public var organization: String?
    /// DNS names for the subjectAltName extension of a peer certificate.
    public var dnsNames: [String]
    public var notValidBefore: Date
    public var notValidAfter: Date
    public var role: Role
    /// For tests of verifiers: common names after `commonName` in the subject, as a hostile
    /// issuer might add them.
    package var additionalCommonNames: [String] = []
    /// For tests of verifiers: a `.peer` certificate with basicConstraints CA:TRUE, its keyUsage
    /// still digitalSignature alone.
    package var marksPeerAsCertificateAuthority = false

    public init(
        commonName: String,
        organization: String? = nil,
        dnsNames: [String] = [],
        notValidBefore: Date = Date(timeIntervalSinceNow: -300),
        notValidAfter: Date = Date(timeIntervalSinceNow: 365 * 86_400),
        role: Role = .peer
    ) {
        self.commonName = commonName
        self.organization = organization
        self.dnsNames = dnsNames
        self.notValidBefore = notValidBefore
        self.notValidAfter = notValidAfter
        self.role = role
    }

    /// Certifies `key`'s public half. With `issuer` nil the certificate is self-signed by `key`.
    public func issue(for key: PrivateKey, issuer: (certificate: Certificate, key: PrivateKey)? = nil) throws(SecurityError) -> Certificate {
        guard !commonName.isEmpty, commonName.utf8.count <= 64 else {
            throw SecurityError(.invalidArgument, "common name must be 1-64 bytes")
        }
        guard notValidBefore < notValidAfter else {
            throw SecurityError(.invalidArgument, "validity ends before it starts")
        }
        guard let notBefore = notValidBefore.timeT, let notAfter = notValidAfter.timeT else {
            throw SecurityError(.invalidArgument, "validity dates must lie within the range of time_t")
        }
        if let issuer, !issuer.key.matches(issuer.certificate) {
            throw SecurityError(.keyMismatch, "the issuer key does not belong to the issuer certificate")
        }
        guard let x509 = X509_new() else { throw SecurityError.openSSL(.internalError, "X509_new failed") }
        let certificate = Certificate(taking: x509)
        try check(X509_set_version(x509, 2), "version")
        try setRandomSerial(x509)
        try check(X509_set_pubkey(x509, key.pkey), "public key")
        guard ASN1_TIME_set(X509_getm_notBefore(x509), notBefore) != nil,
            ASN1_TIME_set(X509_getm_notAfter(x509), notAfter) != nil
        else { throw SecurityError.openSSL(.internalError, "validity") }

        let subject = try makeName()
        defer { X509_NAME_free(subject) }
        try check(X509_set_subject_name(x509, subject), "subject")
        try check(X509_set_issuer_name(x509, issuer.map { X509_get_subject_name($0.certificate.x509) } ?? subject), "issuer")

        let issuerX509 = issuer?.certificate.x509 ?? x509
        for (nid, value) in extensions {
            try addExtension(x509, issuer: issuerX509, nid: nid, value: value)
        }
        let signingKey = issuer?.key ?? key
        let digest = signingKey.algorithm == .ed25519 ? nil : EVP_sha256()
        guard X509_sign(x509, signingKey.pkey, digest) > 0 else { throw SecurityError.openSSL(.internalError, "signing failed") }
        return certificate
    }

    private var extensions: [(Int32, String)] {
        switch role {
        case .certificateAuthority(let pathLength):
            let constraint = pathLength.map { "critical,CA:TRUE,pathlen:\($0)" } ?? "critical,CA:TRUE"
            return [
                (NID_basic_constraints, constraint),
                (NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always"),
            ]
        case .peer:
            var list: [(Int32, String)] = [
                (NID_basic_constraints, marksPeerAsCertificateAuthority ? "critical,CA:TRUE" : "critical,CA:FALSE"),
                (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "clientAuth,serverAuth"),
                (NID_subject_key_identifier, "hash"),
                (NID_authority_key_identifier, "keyid:always"),
            ]
            if !dnsNames.isEmpty {
                list.append((NID_subject_alt_name, dnsNames.map { "DNS:\($0)" }.joined(separator: ",")))
            }
            return list
        }
    }

    private func makeName() throws(SecurityError) -> OpaquePointer {
        guard let name = X509_NAME_new() else { throw SecurityError.openSSL(.internalError, "X509_NAME_new failed") }
        var entries: [(String, String)] = []
        if let organization { entries.append(("O", organization)) }
        entries.append(("CN", commonName))
        entries += additionalCommonNames.map { ("CN", $0) }
        for (field, value) in entries {
            let bytes = Array(value.utf8)
            guard let length = Int32(exactly: bytes.count),
                X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, length, -1, 0) == 1
            else {
                X509_NAME_free(name)
                throw SecurityError.openSSL(.invalidArgument, "name field \(field)")
            }
        }
        return name
    }

    private func setRandomSerial(_ x509: OpaquePointer) throws(SecurityError) {
        // 128 random bits with the top bit clear, so the DER integer stays positive and 16 bytes.
        var bytes = Bytes16Random.make()
        bytes[0] &= 0x7F
        bytes[0] |= 0x40
        guard let bignum = BN_bin2bn(bytes, Int32(bytes.count), nil) else {
            throw SecurityError.openSSL(.internalError, "serial")
        }
        defer { BN_free(bignum) }
        guard BN_to_ASN1_INTEGER(bignum, X509_get_serialNumber(x509)) != nil else {
            throw SecurityError.openSSL(.internalError, "serial")
        }
    }

    private func addExtension(_ x509: OpaquePointer, issuer: OpaquePointer, nid: Int32, value: String) throws(SecurityError) {
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer, x509, nil, nil, 0)
        guard let extensionValue = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
            throw SecurityError.openSSL(.invalidArgument, "extension \(value)")
        }
        defer { X509_EXTENSION_free(extensionValue) }
        try check(X509_add_ext(x509, extensionValue, -1), "extension \(value)")
    }

    private func check(_ result: Int32, _ what: String) throws(SecurityError) {
        guard result == 1 else { throw SecurityError.openSSL(.internalError, "certificate \(what)") }
    }
}

extension Date {
    /// Whole seconds since 1970, cut toward zero as `time_t(_:)` cuts them; nil where that
    /// conversion would trap (an infinite or NaN interval, or one beyond the range of `time_t`).
    package var timeT: time_t? { time_t(exactly: timeIntervalSince1970.rounded(.towardZero)) }
}

enum Bytes16Random {
    static func make() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255, using: &generator) }
        return bytes
    }
}
