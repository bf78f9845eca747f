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
/// buffering it. Fragments are kept as they arrived (slices of received records) and copied once,
/// into a buffer of the exact size, when the last one comes.
public struct MessageAssembler: Sendable {
    private var fragments: [ByteBuffer] = []
    private var total = 0

    public init() {}

    /// Bytes held for an unfinished message.
    public var bufferedByteCount: Int { total }

    /// The whole message when `isEnd`, otherwise nil.
    public mutating func append(_ fragment: ByteBuffer, isEnd: Bool) throws(WireError) -> ByteBuffer? {
        guard total + fragment.readableBytes <= WireLimits.maxMessageSize else {
            throw WireError(.limitExceeded, "message of more than \(WireLimits.maxMessageSize) bytes")
        }
        guard isEnd else {
            fragments.append(fragment)
            total += fragment.readableBytes
            return nil
        }
        guard !fragments.isEmpty else { return fragment }  // the common one-fragment message: no copy
        var message = ByteBufferAllocator().buffer(capacity: total + fragment.readableBytes)
        for part in fragments { message.writeImmutableBuffer(part) }
        message.writeImmutableBuffer(fragment)
        fragments.removeAll(keepingCapacity: true)
        total = 0
        return message
    }
}
