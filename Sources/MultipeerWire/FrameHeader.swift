import NIOCore

/// The 12-byte frame header (docs/PROTOCOL.md §6.1).
public struct FrameHeader: Hashable, Sendable {
    public let type: FrameType
    public let flags: UInt8
    public let channel: UInt32
    public let payloadLength: Int

    /// Reads and validates a header; every rule that does not need the payload is checked here,
    /// so an oversized length is refused before a byte of payload is buffered.
    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> FrameHeader {
        let rawType = try buffer.readWireInteger(as: UInt8.self, "frame type")
        let flags = try buffer.readWireInteger(as: UInt8.self, "frame flags")
        let reserved = try buffer.readWireInteger(as: UInt16.self, "frame reserved")
        let channel = try buffer.readWireInteger(as: UInt32.self, "frame channel")
        let length = try buffer.readWireInteger(as: UInt32.self, "frame length")
        guard let type = FrameType(rawValue: rawType) else {
            throw WireError(.unknownFrameType, "frame type 0x\(String(rawType, radix: 16))")
        }
        guard flags & ~type.allowedFlags == 0 else {
            throw WireError(.disallowedFlags, "\(type) frame with flags 0x\(String(flags, radix: 16))")
        }
        guard reserved == 0 else { throw WireError(.nonZeroReserved, "frame header reserved field") }
        guard type.channelRule.allows(channel) else {
            throw WireError(.invalidChannel, "\(type) frame on channel \(channel)")
        }
        // Compare as UInt64 so 2^32-1 cannot wrap on any platform.
        let bounds = type.payloadLengths
        guard UInt64(length) >= UInt64(bounds.lowerBound), UInt64(length) <= UInt64(bounds.upperBound) else {
            throw WireError(.invalidLength, "\(type) payload of \(length) bytes, allowed \(bounds.lowerBound)-\(bounds.upperBound)")
        }
        return FrameHeader(type: type, flags: flags, channel: channel, payloadLength: Int(length))
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(type.rawValue)
        buffer.writeInteger(flags)
        buffer.writeInteger(UInt16(0))
        buffer.writeInteger(channel)
        buffer.writeInteger(UInt32(payloadLength))
    }
}
