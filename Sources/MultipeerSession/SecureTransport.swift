import MultipeerCrypto
import NIOCore

/// What carries frames after the preambles: TLS, or the bare TCP stream when negotiation said so.
enum SecureTransport {
    case tls(TLSEngine)
    case plaintext

    var isEncrypted: Bool {
        if case .tls = self { return true }
        return false
    }

    /// Frame bytes in, bytes for the socket out.
    func seal(_ bytes: ByteBuffer) throws(SecurityError) -> ByteBuffer? {
        switch self {
        case .plaintext:
            return bytes
        case .tls(let engine):
            try engine.write(bytes)
            return engine.takeOutbound()
        }
    }

    enum Opened {
        case bytes(ByteBuffer)
        case closed
    }

    /// Socket bytes in, frame bytes out (possibly none yet).
    func open(_ bytes: ByteBuffer) throws(SecurityError) -> Opened {
        switch self {
        case .plaintext:
            return .bytes(bytes)
        case .tls(let engine):
            engine.receive(bytes)
            switch try engine.readPlaintext() {
            case .plaintext(let plaintext): return .bytes(plaintext)
            case .closed: return .closed
            }
        }
    }

    /// Anything the engine wants to send on its own (KeyUpdate answers, close_notify).
    func pendingOutput() -> ByteBuffer? {
        if case .tls(let engine) = self { return engine.takeOutbound() }
        return nil
    }
}
