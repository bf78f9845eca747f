import CMultipeerOpenSSL

/// A failure of identities, certificates or the secure channel.
///
/// `code` is a struct over a private enum so that new codes never break callers' switches.
public struct SecurityError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case unreadableFile, malformedData, wrongPassword, keyMismatch, unsupportedKeyType
            case invalidArgument, tlsHandshakeFailed, tlsFailure, internalError
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        public static let unreadableFile = Code(.unreadableFile)
        /// Not a certificate, key or PKCS#12 container this library can parse.
        public static let malformedData = Code(.malformedData)
        /// The password or passphrase does not open the key or container.
        public static let wrongPassword = Code(.wrongPassword)
        /// The private key does not belong to the certificate.
        public static let keyMismatch = Code(.keyMismatch)
        /// Only Ed25519, ECDSA P-256 and RSA of at least 2048 bits are accepted.
        public static let unsupportedKeyType = Code(.unsupportedKeyType)
        public static let invalidArgument = Code(.invalidArgument)
        public static let tlsHandshakeFailed = Code(.tlsHandshakeFailed)
        public static let tlsFailure = Code(.tlsFailure)
        public static let internalError = Code(.internalError)

        public var description: String { "\(base)" }
    }

    public let code: Code
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    /// Adds OpenSSL's queued error text (and clears the queue, so no stale error leaks into the next call).
    static func openSSL(_ code: Code, _ reason: String) -> SecurityError {
        SecurityError(code, reason + OpenSSLErrors.drain())
    }

    public var description: String { "security error (\(code)): \(reason)" }
}

enum OpenSSLErrors {
    /// The thread's OpenSSL error queue as text, emptied.
    static func drain() -> String {
        var messages: [String] = []
        while case let code = ERR_get_error(), code != 0 {
            var text = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &text, text.count)
            messages.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.isEmpty ? "" : " (" + messages.joined(separator: "; ") + ")"
    }

    /// Peeking first: clearing walks the whole queue, and this runs before every TLS read and write.
    static func clear() { if ERR_peek_error() != 0 { ERR_clear_error() } }

    /// True if the last queued error is a PKCS#12 MAC or PEM decryption failure, the signs of a wrong password.
    static func lastIsBadPassword() -> Bool {
        let code = ERR_peek_last_error()
        let library = Int32((code >> 23) & 0xFF)
        let reason = Int32(code & 0x7FFFFF)
        return (library == ERR_LIB_PKCS12 && reason == PKCS12_R_MAC_VERIFY_FAILURE)
            || (library == ERR_LIB_PEM && reason == PEM_R_BAD_DECRYPT)
            || (library == ERR_LIB_EVP && reason == EVP_R_BAD_DECRYPT)
            || (library == ERR_LIB_PROV && reason == PROV_R_BAD_DECRYPT)
    }
}
