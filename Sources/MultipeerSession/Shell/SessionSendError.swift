import MultipeerWire

/// Why `send` refused a message; it never blocks and never partially sends.
/// A struct rather than an enum, so that new reasons can be added without breaking callers.
public struct SessionSendError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case noPeers, notConnected, messageTooLarge, queueFull, datagramsUnsupported
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        public static let noPeers = Code(.noPeers)
        public static let notConnected = Code(.notConnected)
        public static let messageTooLarge = Code(.messageTooLarge)
        /// The peers' send queues are full (`maximumQueuedBytesPerPeer`).
        public static let queueFull = Code(.queueFull)
        /// The peers announced no datagram port, so unreliable messages cannot reach them.
        public static let datagramsUnsupported = Code(.datagramsUnsupported)

        public var description: String { "\(base)" }
    }

    public let code: Code
    /// Identifiers of the peers the refusal is about (not connected, queue full, no datagrams).
    public let peers: [Bytes16]
    /// The refused message's size, for `messageTooLarge`.
    public let messageSize: Int?

    private init(_ code: Code, peers: [Bytes16] = [], messageSize: Int? = nil) {
        self.code = code
        self.peers = peers
        self.messageSize = messageSize
    }

    public static let noPeers = SessionSendError(.noPeers)
    public static func notConnected(_ peers: [Bytes16]) -> SessionSendError { SessionSendError(.notConnected, peers: peers) }
    public static func messageTooLarge(_ size: Int) -> SessionSendError { SessionSendError(.messageTooLarge, messageSize: size) }
    public static func queueFull(_ peers: [Bytes16]) -> SessionSendError { SessionSendError(.queueFull, peers: peers) }
    public static func datagramsUnsupported(_ peers: [Bytes16]) -> SessionSendError {
        SessionSendError(.datagramsUnsupported, peers: peers)
    }

    public var description: String {
        switch code {
        case .noPeers: "no peers given"
        case .messageTooLarge: "message of \(messageSize ?? 0) bytes is too large"
        default: "\(code): \(peers.count) peer(s)"
        }
    }
}
