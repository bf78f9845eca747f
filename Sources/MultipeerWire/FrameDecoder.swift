import NIOCore

/// Incremental, sans-I/O frame decoder: feed it bytes as they arrive, in any split, and pull
/// frames out. Each header is validated as soon as its 12 bytes are in, so an oversized or
/// malformed frame is refused before its payload is buffered. After an error the decoder stays
/// failed: the connection is closing, and no later byte can be trusted.
public struct FrameDecoder: Sendable {
    private enum State: Sendable {
        case awaitingHeader
        case awaitingPayload(FrameHeader)
        case failed(WireError)
    }

    private var state: State = .awaitingHeader
    private var buffer = ByteBuffer()

    public init() {}

    /// Bytes received but not yet returned as frames.
    public var bufferedByteCount: Int { buffer.readableBytes }

    /// Adds received bytes; no copy when nothing is buffered.
    public mutating func append(_ bytes: ByteBuffer) {
        if buffer.readableBytes == 0 {
            buffer = bytes
        } else {
            buffer.writeImmutableBuffer(bytes)
        }
    }

    public mutating func append<Bytes: Sequence>(contentsOf bytes: Bytes) where Bytes.Element == UInt8 {
        buffer.writeBytes(bytes)
    }

    /// The next complete frame, or nil until more bytes arrive.
    public mutating func nextFrame() throws(WireError) -> Frame? {
        while true {
            switch state {
            case .failed(let error):
                throw error
            case .awaitingHeader:
                guard buffer.readableBytes >= WireLimits.frameHeaderLength else {
                    compact()
                    return nil
                }
                do {
                    state = .awaitingPayload(try FrameHeader.decode(from: &buffer))
                } catch {
                    state = .failed(error)
                    throw error
                }
            case .awaitingPayload(let header):
                guard var payload = buffer.readSlice(length: header.payloadLength) else {
                    compact()
                    return nil
                }
                state = .awaitingHeader
                do {
                    return try Frame.decode(header: header, payload: &payload)
                } catch {
                    state = .failed(error)
                    throw error
                }
            }
        }
    }

    /// Drops consumed bytes once they dominate the storage, so a long stream does not grow it.
    private mutating func compact() {
        if buffer.readableBytes == 0 {
            buffer.clear()
        } else if buffer.readerIndex >= 4_096 && buffer.readerIndex >= buffer.readableBytes {
            buffer.discardReadBytes()
        }
    }
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
