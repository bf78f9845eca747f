import NIOCore

/// Application messages with a 4-byte big-endian length prefix, the framing a Swift user would
/// put over a TLS stream to carry messages.
struct LengthPrefixDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    /// Refuses absurd lengths instead of buffering them.
    let maximumLength: Int

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
        guard Int(length) <= maximumLength else { throw FramingError(length: Int(length)) }
        guard buffer.readableBytes >= 4 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        // A slice shares the received storage: no copy of the payload.
        context.fireChannelRead(Self.wrapInboundOut(buffer.readSlice(length: Int(length))!))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }
}

/// Writes the prefix as a buffer of its own ahead of the payload, so the payload is not copied.
final class LengthPrefixWriter: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let payload = Self.unwrapOutboundIn(data)
        var prefix = context.channel.allocator.buffer(capacity: 4)
        prefix.writeInteger(UInt32(payload.readableBytes))
        context.write(Self.wrapOutboundOut(prefix), promise: nil)
        context.write(Self.wrapOutboundOut(payload), promise: promise)
    }
}

struct FramingError: Error, CustomStringConvertible {
    let length: Int
    var description: String { "message of \(length) bytes announced; the benchmark sends at most 1 MiB" }
}
