import NIOCore

/// Incremental, sans-I/O frame decoder. Bytes come either pushed (`append`, then `nextFrame()`)
/// or pulled from a source such as a TLS engine (`nextFrame(pulling:)`), in any split. Each
/// header is validated as soon as its 12 bytes are in, so an oversized or malformed frame is
/// refused before room for its payload is made. A payload is then gathered into storage of its
/// own, exactly its length once 16 KiB of the frame have arrived (16 KiB until then), which the
/// returned frame owns: nothing is compacted or copied again, however long the frame stays
/// alive. After an error the decoder stays failed: the connection is closing, and no later byte
/// can be trusted.
public struct FrameDecoder: Sendable {
    private enum State: Sendable {
        case awaitingHeader
        case awaitingPayload(FrameHeader)
        case failed(WireError)
    }

    private var state: State = .awaitingHeader
    /// The header being gathered; its storage is reused for every frame.
    private var header = ByteBuffer()
    /// The payload being gathered, sized exactly when its first bytes arrive.
    private var payload = ByteBuffer()
    /// Appended bytes not yet taken, oldest first; never written to, so slices of them stay cheap.
    private var pending = CircularBuffer<ByteBuffer>(initialCapacity: 2)

    public init() {}

    /// Bytes received but not yet returned as frames.
    public var bufferedByteCount: Int {
        header.readableBytes + payload.readableBytes + pending.reduce(0) { $0 + $1.readableBytes }
    }

    /// Storage held for the payload in progress (at most 16 KiB until 16 KiB of the frame have arrived).
    public var reservedPayloadCapacity: Int { payload.capacity }

    /// Adds received bytes, without copying them.
    public mutating func append(_ bytes: ByteBuffer) {
        if bytes.readableBytes > 0 { pending.append(bytes) }
    }

    public mutating func append<Bytes: Sequence>(contentsOf bytes: Bytes) where Bytes.Element == UInt8 {
        append(ByteBuffer(bytes: bytes))
    }

    /// The next complete frame from appended bytes, or nil until more arrive. A payload that
    /// arrived whole in one appended buffer is sliced from it rather than copied.
    public mutating func nextFrame() throws(WireError) -> Frame? {
        var source = PendingSource(buffers: pending)
        pending = []
        defer { pending = source.buffers }
        return try decodeNext(from: &source)
    }

    /// The next complete frame, pulling bytes from `fill` as needed. `fill` writes up to
    /// the buffer's count of bytes to its front and returns how many; 0 means none for now.
    public mutating func nextFrame(pulling fill: (UnsafeMutableRawBufferPointer) -> Int) throws(WireError) -> Frame? {
        try nextFrame(pulling: fill, onHand: 0)
    }

    /// The same, told that the source holds `onHand` bytes as the call starts (received, not yet
    /// pulled; for TLS, records not opened yet count by their ciphertext): a payload's storage is
    /// made its exact length at once when 16 KiB of its frame are in, so it is never grown and copied.
    public mutating func nextFrame(pulling fill: (UnsafeMutableRawBufferPointer) -> Int, onHand: Int) throws(WireError) -> Frame? {
        precondition(pending.isEmpty, "a decoder is fed either by append or by pulling, not both")
        return try withoutActuallyEscaping(fill) { (pull) throws(WireError) -> Frame? in
            var source = PullSource(pull: pull, heldAtStart: onHand)
            return try decodeNext(from: &source)
        }
    }

    private mutating func decodeNext<Source: FrameByteSource>(from source: inout Source) throws(WireError) -> Frame? {
        while true {
            switch state {
            case .failed(let error):
                throw error
            case .awaitingHeader:
                let missing = WireLimits.frameHeaderLength - header.readableBytes
                if missing > 0 {
                    guard Self.gather(missing, into: &header, from: &source) else { return nil }
                    continue
                }
                do {
                    let decoded = try FrameHeader.decode(from: &header)
                    header.clear()
                    state = .awaitingPayload(decoded)
                } catch {
                    state = .failed(error)
                    throw error
                }
            case .awaitingPayload(let frameHeader):
                let missing = frameHeader.payloadLength - payload.readableBytes
                if missing > 0 {
                    if payload.readableBytes == 0, let whole = source.slice(length: missing) {
                        payload = whole
                    } else {
                        reservePayloadStorage(for: frameHeader.payloadLength, onHand: source.onHand)
                        guard Self.gather(min(missing, payload.writableBytes), into: &payload, from: &source) else { return nil }
                        continue
                    }
                }
                var complete = payload
                payload = ByteBuffer()
                state = .awaitingHeader
                do {
                    return try Frame.decode(header: frameHeader, payload: &complete)
                } catch {
                    state = .failed(error)
                    throw error
                }
            }
        }
    }

    /// Storage for a payload is exactly the payload's length once `initialPayloadReservation`
    /// bytes of the frame (its header, what was gathered, what the source holds) have arrived,
    /// and at most that many until then. A peer that sends a header and a byte therefore pins
    /// 16 KiB, not the 64 KiB it announced; one that sent 16 KiB pins at most four times that.
    private mutating func reservePayloadStorage(for length: Int, onHand: Int) {
        let arrived = WireLimits.frameHeaderLength + payload.readableBytes + onHand
        if payload.capacity == 0 {
            payload = ByteBufferAllocator().buffer(capacity: arrived >= Self.initialPayloadReservation ? length : min(length, Self.initialPayloadReservation))
        } else if payload.writableBytes == 0 {
            payload.reserveCapacity(length)
        }
    }

    static let initialPayloadReservation = 16_384

    /// Moves up to `count` bytes from the source; false when it had none.
    private static func gather<Source: FrameByteSource>(_ count: Int, into buffer: inout ByteBuffer, from source: inout Source) -> Bool {
        let moved = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            source.fill(UnsafeMutableRawBufferPointer(rebasing: raw[..<count]))
        }
        return moved > 0
    }
}

private protocol FrameByteSource {
    /// Bytes received and not yet taken: at least as many as `fill` can give without more input.
    var onHand: Int { get }
    /// Writes up to the destination's count of bytes to its front; returns how many.
    mutating func fill(_ destination: UnsafeMutableRawBufferPointer) -> Int
    /// Exactly `length` bytes without copying, when the source can give them so.
    mutating func slice(length: Int) -> ByteBuffer?
}

private struct PendingSource: FrameByteSource {
    var buffers: CircularBuffer<ByteBuffer>

    var onHand: Int { buffers.reduce(0) { $0 + $1.readableBytes } }

    mutating func fill(_ destination: UnsafeMutableRawBufferPointer) -> Int {
        buffers.readBytes(into: destination)
    }

    mutating func slice(length: Int) -> ByteBuffer? {
        guard let index = buffers.indices.first, buffers[index].readableBytes >= length else { return nil }
        let slice = buffers[index].readSlice(length: length)
        if buffers[index].readableBytes == 0 { _ = buffers.removeFirst() }
        return slice
    }
}

private struct PullSource: FrameByteSource {
    let pull: (UnsafeMutableRawBufferPointer) -> Int
    /// What the source held when the call started, less what was pulled since: for TLS, over by
    /// whatever of it is not payload (record overhead, padding, records of other content). A hint
    /// for sizing only, never a bound.
    let heldAtStart: Int
    var pulled = 0

    var onHand: Int { max(0, heldAtStart - pulled) }

    mutating func fill(_ destination: UnsafeMutableRawBufferPointer) -> Int {
        let count = pull(destination)
        pulled += count
        return count
    }
    mutating func slice(length: Int) -> ByteBuffer? { nil }
}

extension Frame {
    /// Decodes a buffer that must hold exactly one whole frame.
    public static func decode(exactly bytes: ByteBuffer) throws(WireError) -> Frame {
        var decoder = FrameDecoder()
        decoder.append(bytes)
        guard let frame = try decoder.nextFrame() else {
            throw WireError(.truncated, "\(bytes.readableBytes) bytes end inside a frame")
        }
        guard decoder.bufferedByteCount == 0 else {
            throw WireError(.trailingBytes, "\(decoder.bufferedByteCount) bytes after the frame")
        }
        return frame
    }
}
