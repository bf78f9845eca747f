import CMultipeerOpenSSL
import CMultipeerShims
import CMultipeerSodium

/// The system cryptography libraries this package links, checked once before first use.
public enum CryptoRuntime {
    /// Oldest OpenSSL whose TLS 1.3, exporter and key-update APIs the secure channel relies on.
    public static let minimumOpenSSLVersion: UInt = 0x3000_0000

    public struct InitializationError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    private static let initialization: Result<Void, InitializationError> = {
        guard mp_sodium_init_once() == 0 else {
            return .failure(InitializationError(description: "libsodium failed to initialise"))
        }
        guard OpenSSL_version_num() >= minimumOpenSSLVersion else {
            return .failure(InitializationError(description: "OpenSSL \(openSSLVersion) is older than 3.0"))
        }
        return .success(())
    }()

    /// Initialises libsodium and checks the OpenSSL version; cheap after the first call.
    public static func ensureInitialized() throws(InitializationError) {
        try initialization.get()
    }

    /// The same check with the error type the TLS layer reports.
    static func ensureInitializedForTLS() throws(SecurityError) {
        do {
            try ensureInitialized()
        } catch {
            throw SecurityError(.internalError, error.description)
        }
    }

    /// The linked OpenSSL's version text, for example "OpenSSL 3.0.19 27 Jan 2026".
    public static var openSSLVersion: String {
        String(cString: OpenSSL_version(OPENSSL_VERSION))
    }

    /// The linked libsodium's version text, for example "1.0.18".
    public static var sodiumVersion: String {
        String(cString: sodium_version_string())
    }
}
