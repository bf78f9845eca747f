/// A side's random contribution to the pairing code (docs/PROTOCOL.md §7.3).
public struct PairingNonce: Hashable, Sendable {
    public static let byteCount = 32
    public let bytes: [UInt8]

    public init<Bytes: Collection>(bytes: Bytes) throws(WireError) where Bytes.Element == UInt8 {
        guard bytes.count == Self.byteCount else {
            throw WireError(.invalidLength, "pairing nonce of \(bytes.count) bytes, must be 32")
        }
        self.bytes = Array(bytes)
    }
}
