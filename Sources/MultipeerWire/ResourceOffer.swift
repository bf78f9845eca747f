import NIOCore

/// RESOURCE_OFFER (docs/PROTOCOL.md §6.4.14).
public struct ResourceOffer: Hashable, Sendable {
    /// size, transfer ID and the name's length byte.
    static let fixedLength = 8 + 16 + 1
    static let sendIDLength = 8

    public let size: UInt64
    /// The sender's name for this content to this receiver; the same when it sends the same
    /// content again, so an interrupted transfer can resume (§7.8).
    public let transferID: Bytes16
    public let name: String
    /// Version 2 (docs/PROTOCOL.md §7.9): the sender offered this transfer on an earlier
    /// connection of the session and has not read the verdict on it. Carried in the header's
    /// flags (RESUMED), not the payload.
    public let resumed: Bool
    /// Version 2, on a connection with link recovery (docs/PROTOCOL.md §6.4.14): the sender's
    /// number for this send of the content, the same on every offer of it, so that a receiver
    /// tells its transfers apart from other sends of the same content (§7.9). Carried with the
    /// header's SEND_ID flag.
    public let sendID: UInt64?

    /// An offer made for the first time.
    public init(size: UInt64, transferID: Bytes16, name: String) throws(WireError) {
        try self.init(size: size, transferID: transferID, name: name, resumed: false)
    }

    public init(size: UInt64, transferID: Bytes16, name: String, resumed: Bool) throws(WireError) {
        try self.init(size: size, transferID: transferID, name: name, resumed: resumed, sendID: nil)
    }

    public init(size: UInt64, transferID: Bytes16, name: String, resumed: Bool, sendID: UInt64?) throws(WireError) {
        guard size <= WireLimits.maxResourceSize else {
            throw WireError(.limitExceeded, "resource of \(size) bytes, at most \(WireLimits.maxResourceSize)")
        }
        try checkString8(name, "resource name", allowed: 0...WireLimits.maxChannelNameBytes)
        self.size = size
        self.transferID = transferID
        self.name = name
        self.resumed = resumed
        self.sendID = sendID
    }

    var flags: UInt8 {
        (resumed ? FrameFlags.resourceResumed : 0) | (sendID != nil ? FrameFlags.resourceSendID : 0)
    }

    var encodedLength: Int { Self.fixedLength + name.utf8.count + (sendID != nil ? Self.sendIDLength : 0) }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(size)
        buffer.writeBytes16(transferID)
        buffer.writeString8(name)
        if let sendID { buffer.writeInteger(sendID) }
    }

    static func decode(from buffer: inout ByteBuffer, resumed: Bool, hasSendID: Bool) throws(WireError) -> ResourceOffer {
        let size = try buffer.readWireInteger(as: UInt64.self, "RESOURCE_OFFER size")
        let transferID = try buffer.readWireBytes16("RESOURCE_OFFER transfer ID")
        let name = try buffer.readWireString8("resource name", allowed: 0...WireLimits.maxChannelNameBytes)
        let sendID = hasSendID ? try buffer.readWireInteger(as: UInt64.self, "RESOURCE_OFFER send ID") : nil
        return try ResourceOffer(size: size, transferID: transferID, name: name, resumed: resumed, sendID: sendID)
    }
}

/// A SHA-256 digest, as RESOURCE_COMPLETE carries it.
public struct SHA256Digest: Hashable, Sendable, CustomStringConvertible {
    public static let byteCount = 32
    public let bytes: [UInt8]

    public init<Bytes: Collection>(bytes: Bytes) throws(WireError) where Bytes.Element == UInt8 {
        guard bytes.count == Self.byteCount else {
            throw WireError(.invalidLength, "SHA-256 digest of \(bytes.count) bytes, must be 32")
        }
        self.bytes = Array(bytes)
    }

    public var description: String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
