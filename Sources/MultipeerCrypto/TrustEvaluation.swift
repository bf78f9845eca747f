import CMultipeerOpenSSL
import CMultipeerShims
import Foundation

/// Evaluates a peer's certificate chain against anchors the app chooses (OpenSSL X509_verify_cert),
/// so that a correct trust decision is one line in the trust callback. Trusted chains are
/// remembered (`TrustEvaluationCache`), so a peer that reconnects costs no second check while
/// every certificate involved is still valid.
public struct TrustEvaluation: Sendable {
    public enum Outcome: Hashable, Sendable {
        case trusted
        case untrusted(Failure)

        public var isTrusted: Bool { self == .trusted }
    }

    public struct Failure: Hashable, Sendable, CustomStringConvertible {
        public enum Reason: Hashable, Sendable {
            case noCertificate, expired, notYetValid, unknownIssuer, selfSigned, invalidPurpose
            case badSignature, chainTooLong, notACertificateAuthority, other
            /// A key under 112-bit security (RSA under 2048 bits), or a signature digest that weak,
            /// anywhere in the chain.
            case weakKey
            /// The leaf is a CA certificate (basicConstraints CA:TRUE, or usable as a CA); a peer
            /// identity must be an end entity.
            case leafIsCertificateAuthority
            /// The leaf's subject holds more than one common name, so it certifies no single name.
            case ambiguousCommonName
        }
        public let reason: Reason
        /// OpenSSL's verify error code and text, for logs.
        public let code: Int32
        public let message: String
        public var description: String { "\(reason): \(message)" }
    }

    public var anchors: [Certificate]
    /// Longest chain accepted above the leaf.
    public var maximumDepth: Int
    /// The time to check validity at; nil means now.
    public var validationTime: Date?
    /// Where trusted outcomes are remembered; nil checks every chain afresh.
    package var cache: TrustEvaluationCache?

    public init(anchors: [Certificate], maximumDepth: Int = 4, validationTime: Date? = nil) {
        self.anchors = anchors
        self.maximumDepth = maximumDepth
        self.validationTime = validationTime
        cache = TrustEvaluationCache.shared
    }

    /// `chain` is leaf first, as the trust callback receives it.
    public func evaluate(_ chain: [Certificate]) -> Outcome {
        guard let leaf = chain.first else {
            return .untrusted(Failure(reason: .noCertificate, code: 0, message: "the peer presented no certificate"))
        }
        // A leaf that may sign certificates could vouch for names of its own under the same anchor;
        // CA:TRUE counts even where keyUsage forbids signing, as other verifiers may ignore that.
        if !leaf.isEndEntity {
            OpenSSLErrors.clear()
            return .untrusted(
                Failure(
                    reason: .leafIsCertificateAuthority, code: X509_V_ERR_APPLICATION_VERIFICATION,
                    message: "the leaf certificate is a CA certificate, not a peer identity"))
        }
        // Apps compare the common name with the peer's name; with two, readers disagree on which counts.
        let names = leaf.subjectCommonNames.count
        if names > 1 {
            OpenSSLErrors.clear()
            return .untrusted(
                Failure(
                    reason: .ambiguousCommonName, code: X509_V_ERR_APPLICATION_VERIFICATION,
                    message: "the leaf certificate's subject has \(names) common names"))
        }
        // One whole second for both the cache and OpenSSL, so they judge validity alike.
        let time = validationTime ?? Date()
        guard let seconds = time.timeT else {
            let message = "validation time \(time.timeIntervalSince1970) s after 1970 is outside the range of time_t"
            return .untrusted(Failure(reason: .other, code: -1, message: message))
        }
        guard let cache,
              let key = TrustEvaluationCache.key(
                  anchors: anchors, chain: chain, maximumDepth: maximumDepth, securityLevel: TLSContext.securityLevel)
        else { return verify(leaf: leaf, chain: chain, at: seconds) }
        if cache.isTrusted(key, at: seconds) { return .trusted }
        let outcome = verify(leaf: leaf, chain: chain, at: seconds)
        if outcome == .trusted { cache.insertTrusted(key, anchors: anchors, chain: chain, at: seconds) }
        return outcome
    }

    /// OpenSSL's chain check (X509_verify_cert), uncached.
    private func verify(leaf: Certificate, chain: [Certificate], at seconds: time_t) -> Outcome {
        guard let store = X509_STORE_new(), let context = X509_STORE_CTX_new(), let untrusted = mp_sk_X509_new_null() else {
            return .untrusted(Failure(reason: .other, code: -1, message: "out of memory"))
        }
        defer {
            X509_STORE_CTX_free(context)
            X509_STORE_free(store)
            mp_sk_X509_free(untrusted)
        }
        for anchor in anchors { _ = X509_STORE_add_cert(store, anchor.x509) }
        for certificate in chain.dropFirst() { _ = mp_sk_X509_push(untrusted, certificate.x509) }
        guard X509_STORE_CTX_init(context, store, leaf.x509, untrusted) == 1 else {
            OpenSSLErrors.clear()
            return .untrusted(Failure(reason: .other, code: -1, message: "X509_STORE_CTX_init failed"))
        }
        // Peers authenticate as TLS clients and servers alike; require the client purpose, which
        // our peer certificates carry together with serverAuth.
        _ = X509_STORE_CTX_set_purpose(context, X509_PURPOSE_SSL_CLIENT)
        // A depth beyond Int32 is as unlimited as Int32.max; converting it unclamped would trap.
        X509_STORE_CTX_set_depth(context, Int32(clamping: maximumDepth))
        // The TLS layer's security level, applied to every key and signature in the chain.
        X509_VERIFY_PARAM_set_auth_level(X509_STORE_CTX_get0_param(context), TLSContext.securityLevel)
        X509_STORE_CTX_set_time(context, 0, seconds)
        let verified = X509_verify_cert(context) == 1
        OpenSSLErrors.clear()
        if verified { return .trusted }
        let code = X509_STORE_CTX_get_error(context)
        let message = String(cString: X509_verify_cert_error_string(Int(code)))
        return .untrusted(Failure(reason: Self.reason(code), code: code, message: message))
    }

    private static func reason(_ code: Int32) -> Failure.Reason {
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED: .expired
        case X509_V_ERR_CERT_NOT_YET_VALID: .notYetValid
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
            X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            .unknownIssuer
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN: .selfSigned
        case X509_V_ERR_INVALID_PURPOSE: .invalidPurpose
        case X509_V_ERR_CERT_SIGNATURE_FAILURE: .badSignature
        case X509_V_ERR_CERT_CHAIN_TOO_LONG, X509_V_ERR_PATH_LENGTH_EXCEEDED: .chainTooLong
        case X509_V_ERR_INVALID_CA: .notACertificateAuthority
        case X509_V_ERR_EE_KEY_TOO_SMALL, X509_V_ERR_CA_KEY_TOO_SMALL, X509_V_ERR_CA_MD_TOO_WEAK: .weakKey
        default: .other
        }
    }
}
