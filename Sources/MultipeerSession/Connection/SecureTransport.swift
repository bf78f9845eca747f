import MultipeerCrypto
import MultipeerWire
import NIOCore

/// What carries frames after the preambles: TLS, or the bare TCP stream when negotiation said so.
enum SecureTransport {
    case tls(TLSEngine)
    case plaintext

    var isEncrypted: Bool {
        if case .tls = self { return true }
        return false
    }

    /// A frame in, bytes for the socket out. A bulk payload is sealed in place, never copied
    /// into an encoded frame first.
    func seal(_ frame: Frame) throws(SendRefusal) -> ByteBuffer? {
        // One allocation per frame: the head has room for what follows it in its buffer (the
        // whole payload in the clear, the first record's worth under TLS).
        let following = isEncrypted ? min(frame.payloadLength, TLSEngine.maximumRecordPlaintext) : frame.payloadLength
        var head = ByteBufferAllocator().buffer(capacity: WireLimits.frameHeaderLength + following)
        let body: ByteBuffer?
        do {
            body = try frame.encodeHead(into: &head)
        } catch {
            throw .invalidFrame(error)
        }
        switch self {
        case .plaintext:
            if let body { head.writeImmutableBuffer(body) }
            return head
        case .tls(let engine):
            do {
                try engine.write(head: consume head, body: body ?? ByteBuffer())
            } catch {
                throw .tls(error)
            }
            return engine.takeOutbound()
        }
    }

    enum Received {
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
                frame = try decoder.nextFrame { destination in
                    outcome = Result { () throws(SecurityError) in try engine.read(into: destination) }
                    if case .success(.bytes(let count)) = outcome { return count }
                    return 0
                }
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

    /// Anything the engine wants to send on its own (KeyUpdate answers, close_notify).
    func pendingOutput() -> ByteBuffer? {
        if case .tls(let engine) = self { return engine.takeOutbound() }
        return nil
    }
}
