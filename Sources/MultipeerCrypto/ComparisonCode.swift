import CMultipeerOpenSSL

/// A short code two people can compare on their screens to confirm they see the same pair of
/// certificates: 6 decimal digits from SHA-256 over both fingerprints in a fixed order, so both
/// sides compute the same code (security catalogue item 4).
public enum ComparisonCode {
    public static func make(_ first: Certificate, _ second: Certificate) -> String {
        let fingerprints = [first.sha256Fingerprint, second.sha256Fingerprint].sorted { $0.lexicographicallyPrecedes($1) }
        let input = Array("MPCP comparison code v1".utf8) + fingerprints[0] + fingerprints[1]
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = EVP_Digest(input, input.count, &digest, &length, FetchedAlgorithms.sha256, nil)
        let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000
        let digits = String(value)
        let padded = String(repeating: "0", count: 6 - digits.count) + digits
        return padded.prefix(3) + " " + padded.suffix(3)
    }
}

extension ComparisonCode {
    /// 8 digits from one certificate's fingerprint, for reading out over the phone or comparing on
    /// two screens ("is this the certificate you made?").
    public static func make(for certificate: Certificate) -> String {
        let value = certificate.sha256Fingerprint.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 100_000_000
        let digits = String(value)
        let padded = String(repeating: "0", count: 8 - digits.count) + digits
        return padded.prefix(4) + " " + padded.suffix(4)
    }
}

/// The pairing code of one connection (docs/PROTOCOL.md §7.3): 6 digits from both sides' fresh
/// nonces (the dialer's committed to before it saw the listener's), both peer identifiers and,
/// under TLS, the session's exported key. A man in the middle runs two connections whose codes
/// he cannot make equal but by a one-in-a-million guess per attempt.
public enum PairingCode {
    public static let commitLabel = Array("mpcp pairing commit v1".utf8)
    public static let codeLabel = Array("mpcp pairing code v1".utf8)
    public static let exporterLabel = "EXPORTER-mpcp-pairing"

    public static func commitment(to nonce: [UInt8]) -> [UInt8] {
        SHA256Hasher.digest(commitLabel + nonce)
    }

    public static func make(
        exporter: [UInt8], dialer: [UInt8], listener: [UInt8], commitment: [UInt8], dialerNonce: [UInt8], listenerNonce: [UInt8]
    ) -> String {
        let digest = SHA256Hasher.digest(codeLabel + exporter + dialer + listener + commitment + dialerNonce + listenerNonce)
        let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000
        let digits = String(value)
        let padded = String(repeating: "0", count: 6 - digits.count) + digits
        return padded.prefix(3) + " " + padded.suffix(3)
    }
}
