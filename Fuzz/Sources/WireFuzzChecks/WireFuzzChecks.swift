import MultipeerWire
import NIOCore

/// The properties every fuzz input must keep, shared by the libFuzzer targets and by the
/// corpus replay tests. A violated property traps, which is what libFuzzer records as a crash;
/// bad input itself must only ever produce a `WireError`.
public enum WireFuzzChecks {
    /// Frame decoder: no trap; the same result whether the bytes come at once or in pieces;
    /// every decoded frame re-encodes to exactly the bytes it came from.
    public static func checkFrameDecoder(_ input: UnsafeRawBufferPointer) {
        let bytes = ByteBuffer(bytes: input)
        let whole = decodeFrames(bytes, pieceSize: bytes.readableBytes)
        // Split size from the input itself, so the fuzzer explores splits too.
        let pieceSize = Int(input.first ?? 0) % 13 + 1
        let pieces = decodeFrames(bytes, pieceSize: pieceSize)
        precondition(whole.frames == pieces.frames, "frames differ between whole and split input")
        precondition(whole.error?.code == pieces.error?.code, "errors differ between whole and split input")
        // Pulled the way TLS feeds it, in pieces that run dry between reads.
        let pulled = pullFrames(bytes, pieceSize: Int(input.last ?? 0) % 29 + 1)
        precondition(whole.frames == pulled.frames, "frames differ between pushed and pulled input")
        precondition(whole.error?.code == pulled.error?.code, "errors differ between pushed and pulled input")

        var reencoded = ByteBuffer()
        for frame in whole.frames {
            do {
                try frame.encode(into: &reencoded)
            } catch {
                preconditionFailure("a decoded frame failed to encode: \(error)")
            }
        }
        precondition(
            reencoded.readableBytesView.elementsEqual(bytes.readableBytesView.prefix(reencoded.readableBytes)),
            "re-encoded frames differ from their input bytes")
    }

    /// Peer ID decoder: no trap, and canonical re-encoding.
    public static func checkPeerID(_ input: UnsafeRawBufferPointer) {
        let bytes = ByteBuffer(bytes: input)
        guard let peer = try? WirePeerID.decode(exactly: bytes) else { return }
        var out = ByteBuffer()
        peer.encode(into: &out)
        precondition(out == bytes, "peer ID re-encodes differently")
        precondition(out.readableBytes <= WirePeerID.maxEncodedLength)
    }

    /// Connection data, preamble and datagram header decoders: no trap, canonical re-encoding.
    public static func checkConnectionData(_ input: UnsafeRawBufferPointer) {
        let bytes = ByteBuffer(bytes: input)
        if let data = try? ConnectionData.decode(bytes) {
            var out = ByteBuffer()
            data.encode(into: &out)
            precondition(out == bytes, "connection data re-encodes differently")
        }
        if let preamble = try? Preamble.decode(bytes) {
            var out = ByteBuffer()
            preamble.encode(into: &out)
            precondition(out == bytes, "preamble re-encodes differently")
        }
        if let (header, body) = try? DatagramHeader.decode(datagram: bytes) {
            var out = ByteBuffer()
            header.encode(into: &out)
            out.writeImmutableBuffer(body)
            precondition(out == bytes, "datagram re-encodes differently")
        }
    }

    private static func pullFrames(_ bytes: ByteBuffer, pieceSize: Int) -> (frames: [Frame], error: WireError?) {
        var decoder = FrameDecoder()
        var frames: [Frame] = []
        var remaining = bytes
        while true {
            var budget = pieceSize
            let before = remaining.readableBytes
            // What the source says it holds only sizes storage: told truly, not at all, or
            // overstated (a source that counts ciphertext), the frames must come out the same.
            let onHand = switch pieceSize % 3 {
            case 0: remaining.readableBytes
            case 1: 0
            default: remaining.readableBytes + 70_000
            }
            do {
                while let frame = try decoder.nextFrame(pulling: { destination in
                    let count = min(destination.count, budget, remaining.readableBytes)
                    remaining.readWithUnsafeReadableBytes { source in
                        destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[..<count]))
                        return count
                    }
                    budget -= count
                    return count
                }, onHand: onHand) {
                    frames.append(frame)
                }
            } catch {
                return (frames, error)
            }
            if remaining.readableBytes == 0 || remaining.readableBytes == before { return (frames, nil) }
        }
    }

    private static func decodeFrames(_ bytes: ByteBuffer, pieceSize: Int) -> (frames: [Frame], error: WireError?) {
        var decoder = FrameDecoder()
        var frames: [Frame] = []
        var remaining = bytes
        repeat {
            let piece = remaining.readSlice(length: min(max(pieceSize, 1), remaining.readableBytes))!
            decoder.append(piece)
            do {
                while let frame = try decoder.nextFrame() { frames.append(frame) }
            } catch {
                return (frames, error)
            }
        } while remaining.readableBytes > 0
        return (frames, nil)
    }
}
