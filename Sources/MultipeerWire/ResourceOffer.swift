import NIOCore

/// RESOURCE_OFFER (docs/PROTOCOL.md §6.4.14).
public struct ResourceOffer: Hashable, Sendable {
    public let size: UInt64
    public let name: String

    public init(size: UInt64, name: String) throws(WireError) {
        guard size <= WireLimits.maxResourceSize else {
            throw WireError(.limitExceeded, "resource of \(size) bytes, at most \(WireLimits.maxResourceSize)")
        }
        try checkString8(name, "resource name", allowed: 0...WireLimits.maxChannelNameBytes)
        self.size = size
        self.name = name
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(size)
        buffer.writeString8(name)
    }

    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> ResourceOffer {
        let size = try buffer.readWireInteger(as: UInt64.self, "RESOURCE_OFFER size")
        let name = try buffer.readWireString8("resource name", allowed: 0...WireLimits.maxChannelNameBytes)
        return try ResourceOffer(size: size, name: name)
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
