import NIOCore

extension Frame {
    /// Cuts a reliable message into MESSAGE frames of at most one frame payload each
    /// (docs/PROTOCOL.md §6.4.8), slicing without copying.
    public static func messageFragments(of message: ByteBuffer) throws(WireError) -> [Frame] {
        guard message.readableBytes <= WireLimits.maxMessageSize else {
            throw WireError(.limitExceeded, "message of \(message.readableBytes) bytes, at most \(WireLimits.maxMessageSize)")
        }
        guard message.readableBytes > 0 else { return [.message(message, isEnd: true)] }
        var remaining = message
        var frames: [Frame] = []
        frames.reserveCapacity((message.readableBytes + WireLimits.maxFramePayload - 1) / WireLimits.maxFramePayload)
        while remaining.readableBytes > 0 {
            let slice = remaining.readSlice(length: min(remaining.readableBytes, WireLimits.maxFramePayload))!
            frames.append(.message(slice, isEnd: remaining.readableBytes == 0))
        }
        return frames
    }
}

/// Joins MESSAGE fragments back into messages, refusing any message over the limit before
/// buffering it.
public struct MessageAssembler: Sendable {
    private var pending: ByteBuffer?

    public init() {}

    /// Bytes held for an unfinished message.
    public var bufferedByteCount: Int { pending?.readableBytes ?? 0 }

    /// The whole message when `isEnd`, otherwise nil.
    public mutating func append(_ fragment: ByteBuffer, isEnd: Bool) throws(WireError) -> ByteBuffer? {
        let total = bufferedByteCount + fragment.readableBytes
        guard total <= WireLimits.maxMessageSize else {
            throw WireError(.limitExceeded, "message of more than \(WireLimits.maxMessageSize) bytes")
        }
        guard var message = pending else {
            if isEnd { return fragment }  // the common one-fragment message: no copy
            var first = ByteBufferAllocator().buffer(capacity: min(total * 2, WireLimits.maxMessageSize))
            first.writeImmutableBuffer(fragment)
            pending = first
            return nil
        }
        pending = nil
        message.writeImmutableBuffer(fragment)
        if isEnd { return message }
        pending = message
        return nil
    }
}
