import NIOCore

/// A peer ID as it travels (docs/PROTOCOL.md §9.1): 16 random bytes and a display name.
public struct WirePeerID: Hashable, Sendable {
    public static let encodingVersion: UInt8 = 1
    public static let displayNameBytes = 1...WireLimits.maxDisplayNameBytes
    public static let maxEncodedLength = 1 + 16 + 1 + WireLimits.maxDisplayNameBytes

    public let identifier: Bytes16
    public let displayName: String

    public init(identifier: Bytes16, displayName: String) throws(WireError) {
        try checkString8(displayName, "display name", allowed: Self.displayNameBytes)
        self.identifier = identifier
        self.displayName = displayName
    }

    public var encodedLength: Int { 1 + 16 + 1 + displayName.utf8.count }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(Self.encodingVersion)
        buffer.writeBytes16(identifier)
        buffer.writeString8(displayName)
    }

    /// Reads one peer ID from the front of `buffer`; bytes after it are left for the caller.
    public static func decode(from buffer: inout ByteBuffer) throws(WireError) -> WirePeerID {
        let version = try buffer.readWireInteger(as: UInt8.self, "peer ID encoding version")
        guard version == encodingVersion else {
            throw WireError(.unsupportedVersion, "peer ID encoding version \(version)")
        }
        let identifier = try buffer.readWireBytes16("peer identifier")
        let name = try buffer.readWireString8("display name", allowed: displayNameBytes)
        return try WirePeerID(identifier: identifier, displayName: name)
    }

    /// Decodes a buffer that holds exactly one peer ID and nothing else.
    public static func decode(exactly bytes: ByteBuffer) throws(WireError) -> WirePeerID {
        guard bytes.readableBytes <= maxEncodedLength else {
            throw WireError(.invalidLength, "peer ID: \(bytes.readableBytes) bytes, at most \(maxEncodedLength)")
        }
        var buffer = bytes
        let peer = try decode(from: &buffer)
        try buffer.requireFullyRead("peer ID")
        return peer
    }
}
