import NIOCore

extension Frame {
    /// The most this implementation puts in one MESSAGE, STREAM_DATA or RESOURCE_CHUNK frame:
    /// 65,536 bytes with the header, so that a full frame is four whole 16 KiB TLS records,
    /// which a receiver opens straight into the frame's payload. A peer may send up to
    /// `WireLimits.maxFramePayload` (docs/PROTOCOL.md §6.4.8).
    public static let largestSentPayload = WireLimits.maxFramePayload - WireLimits.frameHeaderLength

    /// Cuts a reliable message into MESSAGE frames of at most `largestSentPayload` bytes each
    /// (docs/PROTOCOL.md §6.4.8), slicing without copying.
    public static func messageFragments(of message: ByteBuffer) throws(WireError) -> [Frame] {
        guard message.readableBytes <= WireLimits.maxMessageSize else {
            throw WireError(.limitExceeded, "message of \(message.readableBytes) bytes, at most \(WireLimits.maxMessageSize)")
        }
        guard message.readableBytes > 0 else { return [.message(message, isEnd: true)] }
        var remaining = message
        var frames: [Frame] = []
        frames.reserveCapacity((message.readableBytes + largestSentPayload - 1) / largestSentPayload)
        while remaining.readableBytes > 0 {
            let slice = remaining.readSlice(length: min(remaining.readableBytes, largestSentPayload))!
            frames.append(.message(slice, isEnd: remaining.readableBytes == 0))
        }
        return frames
    }
}

/// Joins MESSAGE fragments back into messages, refusing any message over the limit before
/// buffering it. Large fragments are kept as they arrived (slices of received records) and copied
/// once, into a buffer of the exact size, when the last one comes. Small fragments are copied at
/// once into a buffer of their own run, so that a peer sending tiny or empty fragments costs
/// memory in proportion to its bytes, not to its frame count.
public struct MessageAssembler: Sendable {
    /// Fragments at least this large are kept as slices: at most 16 MiB / 4 KiB of them per message.
    public static let sliceThreshold = 4_096

    private var fragments: [ByteBuffer] = []
    /// Whether the last element of `fragments` is a run of small fragments that we own and may grow.
    private var lastIsRun = false
    private var total = 0

    public init() {}

    /// Payload bytes held for an unfinished message.
    public var bufferedByteCount: Int { total }

    /// Bytes of storage held for an unfinished message, counting buffer capacity.
    public var retainedByteCount: Int { fragments.reduce(0) { $0 + $1.capacity } }

    /// Buffers held for an unfinished message (bounded by `maxMessageSize / sliceThreshold` plus runs).
    public var heldBufferCount: Int { fragments.count }

    /// The whole message when `isEnd`, otherwise nil.
    public mutating func append(_ fragment: ByteBuffer, isEnd: Bool) throws(WireError) -> ByteBuffer? {
        guard fragment.readableBytes <= WireLimits.maxMessageSize - total else {
            throw WireError(.limitExceeded, "message of more than \(WireLimits.maxMessageSize) bytes")
        }
        guard isEnd else {
            hold(fragment)
            return nil
        }
        guard !fragments.isEmpty else { return fragment }  // the common one-fragment message: no copy
        var message = ByteBufferAllocator().buffer(capacity: total + fragment.readableBytes)
        for part in fragments { message.writeImmutableBuffer(part) }
        message.writeImmutableBuffer(fragment)
        fragments = []
        lastIsRun = false
        total = 0
        return message
    }

    private mutating func hold(_ fragment: ByteBuffer) {
        total += fragment.readableBytes
        if fragment.readableBytes >= Self.sliceThreshold {
            fragments.append(fragment)
            lastIsRun = false
        } else if fragment.readableBytes > 0 {
            if lastIsRun {
                fragments[fragments.count - 1].writeImmutableBuffer(fragment)
            } else {
                var run = ByteBufferAllocator().buffer(capacity: max(fragment.readableBytes, 256))
                run.writeImmutableBuffer(fragment)
                fragments.append(run)
                lastIsRun = true
            }
        }
        // An empty fragment adds nothing to hold.
    }
}
