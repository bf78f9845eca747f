import CMultipeerOpenSSL

/// What the TLS connection that made a member leaves behind for resuming it on later
/// connections (docs/PROTOCOL.md §7.9), both from that connection's exporter: an ID that finds the
/// suspended member, and a key that proves, on the new connection, that the peer held the old
/// session. The proof covers a value exported from the new connection and the prover's role, so
/// it cannot be replayed on another connection or reflected back.
public final class ResumptionKeys: Sendable {
    public enum Role: UInt8, Sendable { case dialer = 0, listener = 1 }

    public static let idLabel = "MPCP resumption v2 id"
    public static let keyLabel = "MPCP resumption v2 key"
    public static let bindingLabel = "MPCP resumption v2 binding"
    public static let idLength = 16
    public static let keyLength = 32
    public static let bindingLength = 32
    public static let proofLength = 32
    private static let proofLabel = Array("MPCP resume v2".utf8)

    /// Names the suspended member; sent only inside the new connection's TLS.
    public let id: [UInt8]
    private let key: SecureBytes

    /// `export(label, length)`: the old connection's exporter with an empty context.
    public init(export: (String, Int) throws(SecurityError) -> SecureBytes) throws(SecurityError) {
        id = try export(Self.idLabel, Self.idLength).withUnsafeBytes { Array($0) }
        key = try export(Self.keyLabel, Self.keyLength)
    }

    /// For tests: keys made from given bytes.
    package init(id: [UInt8], key: SecureBytes) {
        self.id = id
        self.key = key
    }

    /// HMAC-SHA256(key, "MPCP resume v2" | role | binding), where `binding` is the new
    /// connection's export under `bindingLabel`.
    public func proof(by role: Role, binding: SecureBytes) throws(SecurityError) -> SecureBytes {
        var message = Self.proofLabel + [role.rawValue]
        binding.withUnsafeBytes { message += $0 }
        defer { message.withUnsafeMutableBytes { SecureBytes.wipe($0) } }
        var failed = false
        let proof = SecureBytes(count: Self.proofLength) { out in
            var length: UInt32 = 0
            key.withUnsafeBytes { key in
                failed = HMAC(
                    FetchedAlgorithms.sha256, key.baseAddress, Int32(key.count), message, message.count,
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self), &length) == nil || Int(length) != Self.proofLength
            }
        }
        guard !failed else { throw SecurityError.openSSL(.internalError, "HMAC-SHA256 failed") }
        return proof
    }

    /// Whether `received` is the peer's proof for its `role` on the connection `binding` names;
    /// compared in constant time.
    public func verify(_ received: [UInt8], by role: Role, binding: SecureBytes) -> Bool {
        guard received.count == Self.proofLength, let expected = try? proof(by: role, binding: binding) else { return false }
        return expected.constantTimeEquals(SecureBytes(copying: received))
    }
}
