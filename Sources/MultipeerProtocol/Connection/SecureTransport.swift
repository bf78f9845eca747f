import MultipeerCrypto
import MultipeerWire
import NIOCore

/// What carries frames after the preambles: TLS, or the bare TCP stream when negotiation said so.
package enum SecureTransport {
    case tls(TLSEngine)
    case plaintext

    var isEncrypted: Bool {
        if case .tls = self { return true }
        return false
    }

    /// In the clear, a payload at least this large goes to the socket as a buffer of its own
    /// (gathered by `writev`) instead of being copied behind its head.
    static let plaintextGatherThreshold = 4_096

    /// A frame in, bytes for the socket out, in order (none when TLS has nothing to send yet). A
    /// bulk payload is never copied into an encoded frame first: under TLS it is sealed in place,
    /// in the clear it follows its head as its own buffer.
    /// With `coalescing`, TLS may hold a small frame to share a record with the next ones; the
    /// caller then owes `sealHeld()` before the connection is flushed.
    func seal(_ frame: Frame, coalescing: Bool = false) throws(SendRefusal) -> [ByteBuffer] {
        let gathers = !isEncrypted && frame.payloadLength >= Self.plaintextGatherThreshold
        // One allocation per frame: the head has room for what follows it in its buffer (the
        // whole payload in the clear unless it is gathered; under TLS only a payload that may be
        // held for a shared record, since records are sealed from head and body in place).
        let following: Int
        if isEncrypted {
            following = coalescing && frame.payloadLength <= TLSEngine.maximumRecordPlaintext ? frame.payloadLength : 0
        } else {
            following = gathers ? 0 : frame.payloadLength
        }
        var head = ByteBufferAllocator().buffer(capacity: WireLimits.frameHeaderLength + following)
        let body: ByteBuffer?
        do {
            body = try frame.encodeHead(into: &head)
        } catch {
            throw .invalidFrame(error)
        }
        switch self {
        case .plaintext:
            guard let body else { return [head] }
            if gathers { return [head, body] }
            head.writeImmutableBuffer(body)
            return [head]
        case .tls(let engine):
            do {
                try engine.write(head: consume head, body: body ?? ByteBuffer(), coalescing: coalescing)
            } catch {
                throw .tls(error)
            }
            return engine.takeOutbound().map { [$0] } ?? []
        }
    }

    package enum Received {
        case frame(Frame)
        /// Nothing more until more bytes arrive.
        case needMore
        /// The peer closed TLS (close_notify).
        case closed
    }

    /// Takes bytes from the socket; frames come out of `nextFrame(_:)`.
    func receive(_ bytes: ByteBuffer, decoder: inout FrameDecoder) {
        switch self {
        case .plaintext: decoder.append(bytes)
        case .tls(let engine): engine.receive(bytes)
        }
    }

    /// The next frame from what was received. TLS records are opened straight into the
    /// decoder's storage for the frame.
    func nextFrame(_ decoder: inout FrameDecoder) throws(ConnectionError) -> Received {
        switch self {
        case .plaintext:
            do {
                return try decoder.nextFrame().map(Received.frame) ?? .needMore
            } catch {
                throw ConnectionError(.protocolViolation(error))
            }
        case .tls(let engine):
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            let frame: Frame?
            do {
                frame = try decoder.nextFrame(
                    pulling: { destination in
                        outcome = Result { () throws(SecurityError) in try engine.read(into: destination) }
                        if case .success(.bytes(let count)) = outcome { return count }
                        return 0
                    },
                    onHand: engine.receivedByteCountUnread)
            } catch {
                throw ConnectionError(.protocolViolation(error))
            }
            if let frame { return .frame(frame) }
            switch outcome {
            case .failure(let error): throw ConnectionError(.tls(error))
            case .success(.closed): return .closed
            case .success(.bytes), .success(.wouldBlock): return .needMore
            }
        }
    }

    /// The records of frames held for coalescing, and anything else waiting to go.
    func sealHeld() throws(SecurityError) -> [ByteBuffer] {
        guard case .tls(let engine) = self else { return [] }
        try engine.sealHeld()
        return engine.takeOutbound().map { [$0] } ?? []
    }

    /// Seals what TLS holds but leaves it queued with the bytes already waiting, whose count
    /// it returns (0 in the clear).
    func sealHeldKeepingQueued() throws(SecurityError) -> Int {
        guard case .tls(let engine) = self else { return 0 }
        try engine.sealHeld()
        return engine.outboundByteCount
    }
}
