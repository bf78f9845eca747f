import CMultipeerOpenSSL

/// The TLS 1.3 cipher suites the contexts allow (docs/PROTOCOL.md §5), with what record
/// protection needs to know of each.
package enum TLSCipherSuite: Sendable, Equatable, CaseIterable {
    case aes128GCMSHA256, aes256GCMSHA384, chacha20Poly1305SHA256

    package init?(protocolID: UInt16) {
        switch protocolID {
        case 0x1301: self = .aes128GCMSHA256
        case 0x1302: self = .aes256GCMSHA384
        case 0x1303: self = .chacha20Poly1305SHA256
        default: return nil
        }
    }

    /// The suite's name in OpenSSL (and RFC 8446).
    package var openSSLName: String {
        switch self {
        case .aes128GCMSHA256: "TLS_AES_128_GCM_SHA256"
        case .aes256GCMSHA384: "TLS_AES_256_GCM_SHA384"
        case .chacha20Poly1305SHA256: "TLS_CHACHA20_POLY1305_SHA256"
        }
    }

    package var keyLength: Int { self == .aes128GCMSHA256 ? 16 : 32 }
    package var hashLength: Int { self == .aes256GCMSHA384 ? 48 : 32 }
    var digest: OpaquePointer? { self == .aes256GCMSHA384 ? FetchedAlgorithms.sha384 : FetchedAlgorithms.sha256 }

    var cipher: OpaquePointer? {
        switch self {
        case .aes128GCMSHA256: FetchedAlgorithms.aes128GCM
        case .aes256GCMSHA384: FetchedAlgorithms.aes256GCM
        case .chacha20Poly1305SHA256: FetchedAlgorithms.chacha20Poly1305
        }
    }
}

/// The part of RFC 8446's key schedule that follows the handshake: traffic keys and IVs from a
/// traffic secret (§7.3), and the next secret on KeyUpdate (§7.2).
enum TLSKeySchedule {
    static let ivLength = 12

    /// A traffic secret is exactly as long as the suite's hash (§7.1). HKDF would take a key of
    /// any length, so a secret of the wrong suite or a truncated one is refused here instead of
    /// keying records no peer can open.
    static func checkTrafficSecret(_ secret: SecureBytes, suite: TLSCipherSuite) throws(SecurityError) {
        guard secret.count == suite.hashLength else {
            throw SecurityError(
                .invalidArgument, "a TLS traffic secret of \(secret.count) bytes for \(suite), whose hash is \(suite.hashLength) bytes")
        }
    }

    /// HKDF-Expand-Label(secret, label, "", length) (§7.1), wiped when released.
    static func expandLabel(_ secret: SecureBytes, _ label: String, length: Int, suite: TLSCipherSuite) throws(SecurityError) -> SecureBytes {
        let fullLabel = Array("tls13 \(label)".utf8)
        precondition(length <= 255 * suite.hashLength && fullLabel.count <= 255, "HKDF-Expand-Label out of range")
        let info = [UInt8(length >> 8), UInt8(length & 0xff), UInt8(fullLabel.count)] + fullLabel + [0]
        var failed = false
        let output = SecureBytes(count: length) { out in
            failed = !expand(secret, info: info, hashLength: suite.hashLength, digest: suite.digest, into: out)
        }
        guard !failed else { throw SecurityError.openSSL(.internalError, "HKDF-Expand failed") }
        return output
    }

    /// HKDF-Expand (RFC 5869 §2.3): T(i) = HMAC(secret, T(i-1) | info | i), concatenated.
    private static func expand(
        _ secret: SecureBytes, info: [UInt8], hashLength: Int, digest: OpaquePointer?, into out: UnsafeMutableRawBufferPointer
    ) -> Bool {
        // Scratch for T(i-1) | info | i, and for T(i): both hold key material, so both are wiped.
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 2 * hashLength + info.count + 1, alignment: 16)
        defer {
            SecureBytes.wipe(scratch)
            scratch.deallocate()
        }
        let block = scratch.baseAddress! + hashLength + info.count + 1
        var previous = 0
        var produced = 0
        var counter: UInt8 = 1
        while produced < out.count {
            info.withUnsafeBytes { (scratch.baseAddress! + previous).copyMemory(from: $0.baseAddress!, byteCount: info.count) }
            scratch.storeBytes(of: counter, toByteOffset: previous + info.count, as: UInt8.self)
            var blockLength: UInt32 = 0
            let ok = secret.withUnsafeBytes { key in
                HMAC(digest, key.baseAddress, Int32(key.count),
                     scratch.baseAddress!.assumingMemoryBound(to: UInt8.self), previous + info.count + 1,
                     block.assumingMemoryBound(to: UInt8.self), &blockLength) != nil
            }
            guard ok, Int(blockLength) == hashLength else { return false }
            let taken = min(hashLength, out.count - produced)
            (out.baseAddress! + produced).copyMemory(from: block, byteCount: taken)
            produced += taken
            scratch.baseAddress!.copyMemory(from: block, byteCount: hashLength)
            previous = hashLength
            counter += 1
        }
        return true
    }
}
