import CMultipeerOpenSSL

/// Algorithms fetched from OpenSSL's providers once. The legacy getters (`EVP_sha256()`,
/// `EVP_aes_128_gcm()`) make OpenSSL 3 look the algorithm up again on every use, under a lock;
/// a fetched one is used as is. Fetched algorithms are immutable and safe to share between threads.
/// They are fixed at first use, from the default library context: providers or properties (FIPS)
/// configured later are not seen by them.
enum FetchedAlgorithms {
    nonisolated(unsafe) static let sha256: OpaquePointer? = fetchDigest("SHA2-256", else: EVP_sha256())
    nonisolated(unsafe) static let sha384: OpaquePointer? = fetchDigest("SHA2-384", else: EVP_sha384())
    nonisolated(unsafe) static let aes128GCM: OpaquePointer? = fetchCipher("AES-128-GCM", else: EVP_aes_128_gcm())
    nonisolated(unsafe) static let aes256GCM: OpaquePointer? = fetchCipher("AES-256-GCM", else: EVP_aes_256_gcm())
    nonisolated(unsafe) static let chacha20Poly1305: OpaquePointer? = fetchCipher("ChaCha20-Poly1305", else: EVP_chacha20_poly1305())

    // A failed fetch (no provider offers it) falls back to the legacy getter, whose own fetch then
    // fails where it is used, with OpenSSL's error, as before.
    private static func fetchDigest(_ name: String, else legacy: OpaquePointer?) -> OpaquePointer? {
        if let fetched = EVP_MD_fetch(nil, name, nil) { return fetched }
        OpenSSLErrors.clear()
        return legacy
    }

    private static func fetchCipher(_ name: String, else legacy: OpaquePointer?) -> OpaquePointer? {
        if let fetched = EVP_CIPHER_fetch(nil, name, nil) { return fetched }
        OpenSSLErrors.clear()
        return legacy
    }
}
