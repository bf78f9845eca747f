/// RESUME's payload (docs/PROTOCOL.md §7.9): the sender's proof that it held the suspended
/// session, and how many of the peer's reliable messages it delivered in that session.
public struct ResumeProof: Hashable, Sendable {
    public static let proofLength = 32
    public static let encodedLength = proofLength + 8

    public let proof: [UInt8]
    public let delivered: UInt64

    public init<Bytes: Collection>(proof: Bytes, delivered: UInt64) throws(WireError) where Bytes.Element == UInt8 {
        guard proof.count == Self.proofLength else {
            throw WireError(.invalidLength, "resumption proof of \(proof.count) bytes, must be 32")
        }
        self.proof = Array(proof)
        self.delivered = delivered
    }
}
