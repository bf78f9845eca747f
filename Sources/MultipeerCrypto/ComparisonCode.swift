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
        _ = EVP_Digest(input, input.count, &digest, &length, EVP_sha256(), nil)
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
