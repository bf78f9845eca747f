import NIOCore

/// The clear 20-byte header of every datagram (docs/PROTOCOL.md §8). It is also the AEAD's
/// associated data, so its encoding must be byte-exact on both sides.
public struct DatagramHeader: Hashable, Sendable {
    public enum Kind: UInt8, CaseIterable, Sendable {
        case sealed = 0x01
        case plain = 0x02

        /// Smallest whole datagram of this kind.
        public var minimumLength: Int {
            WireLimits.datagramHeaderLength + (self == .sealed ? WireLimits.datagramTagLength : 0)
        }
    }

    public let kind: Kind
    public let receiverID: UInt32
    public let epoch: UInt32
    public let counter: UInt64

    public init(kind: Kind, receiverID: UInt32, epoch: UInt32, counter: UInt64) {
        self.kind = kind
        self.receiverID = receiverID
        self.epoch = epoch
        self.counter = counter
    }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(kind.rawValue)
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt16(0))
        buffer.writeInteger(receiverID)
        buffer.writeInteger(epoch)
        buffer.writeInteger(counter)
    }

    /// The 24-byte XChaCha20-Poly1305 nonce: 12 zero bytes, epoch, counter.
    public var nonce: [UInt8] { withNonce { Array($0) } }

    /// The nonce in stack memory, for the per-datagram path (no allocation).
    public func withNonce<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        var bytes: (UInt32, UInt32, UInt32, UInt32, UInt64) = (0, 0, 0, epoch.bigEndian, counter.bigEndian)
        return try withUnsafeBytes(of: &bytes) { raw in
            precondition(raw.count == 24)
            return try body(raw)
        }
    }

    /// The encoded header in stack memory (the AEAD's associated data), with no allocation.
    public func withEncodedBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        var bytes: (UInt32, UInt32, UInt32, UInt32, UInt32) = (
            (UInt32(kind.rawValue) << 24).bigEndian, receiverID.bigEndian, epoch.bigEndian,
            UInt32(counter >> 32).bigEndian, UInt32(truncatingIfNeeded: counter).bigEndian
        )
        return try withUnsafeBytes(of: &bytes) { raw in
            precondition(raw.count == WireLimits.datagramHeaderLength)
            return try body(raw)
        }
    }

    /// Splits a received UDP payload into header and body, applying receiving rule 1's length and
    /// format checks. The receiver ID lookup and the AEAD are the caller's.
    public static func decode(datagram: ByteBuffer) throws(WireError) -> (header: DatagramHeader, body: ByteBuffer) {
        guard datagram.readableBytes <= WireLimits.maxUDPPayload else {
            throw WireError(.invalidLength, "datagram of \(datagram.readableBytes) bytes, at most \(WireLimits.maxUDPPayload)")
        }
        var buffer = datagram
        let rawKind = try buffer.readWireInteger(as: UInt8.self, "datagram kind")
        guard let kind = Kind(rawValue: rawKind) else { throw WireError(.invalidValue, "datagram kind \(rawKind)") }
        guard datagram.readableBytes >= kind.minimumLength else {
            throw WireError(.invalidLength, "\(kind) datagram of \(datagram.readableBytes) bytes, at least \(kind.minimumLength)")
        }
        try buffer.readWireReservedZero(as: UInt8.self, "datagram reserved")
        try buffer.readWireReservedZero(as: UInt16.self, "datagram reserved")
        let header = DatagramHeader(
            kind: kind,
            receiverID: try buffer.readWireInteger("datagram receiverID"),
            epoch: try buffer.readWireInteger("datagram epoch"),
            counter: try buffer.readWireInteger("datagram counter")
        )
        return (header, buffer)
    }
}
