import CMultipeerOpenSSL

/// Incremental SHA-256 on OpenSSL, for content too large to hold (resources, docs/PROTOCOL.md §7.8).
/// Not thread-safe: one owner feeds it in order. Its state is a digest of content we stored:
/// released, OpenSSL zeroes it (`EVP_MD_CTX_free` clears the digest's context before freeing).
public final class SHA256Hasher: @unchecked Sendable {
    public static let digestLength = 32
    private let context: OpaquePointer
    private var finished = false

    public init() {
        guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, FetchedAlgorithms.sha256, nil) == 1 else {
            fatalError("OpenSSL cannot start SHA-256")  // only when out of memory
        }
        self.context = context
    }

    private init(context: OpaquePointer) { self.context = context }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "SHA256Hasher used after finalize")
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// An independent hasher in the same state (`EVP_MD_CTX_copy_ex`): fed the same bytes, both
    /// give the same digest. Nil when OpenSSL cannot copy it (out of memory).
    public func copy() -> SHA256Hasher? {
        precondition(!finished, "SHA256Hasher copied after finalize")
        guard let duplicate = EVP_MD_CTX_new() else { return nil }
        guard EVP_MD_CTX_copy_ex(duplicate, context) == 1 else {
            EVP_MD_CTX_free(duplicate)
            return nil
        }
        return SHA256Hasher(context: duplicate)
    }

    /// The digest of everything fed so far; the hasher cannot be fed afterwards.
    public func finalize() -> [UInt8] {
        precondition(!finished, "SHA256Hasher finalized twice")
        finished = true
        var digest = [UInt8](repeating: 0, count: Self.digestLength)
        var length: UInt32 = 0
        digest.withUnsafeMutableBufferPointer { _ = EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        return digest
    }

    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        let hasher = SHA256Hasher()
        hasher.update(bytes)
        return hasher.finalize()
    }
}
