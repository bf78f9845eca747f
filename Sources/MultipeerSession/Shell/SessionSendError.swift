import MultipeerWire
import MultipeerProtocol

/// Why `send` refused a message; it never blocks and never partially sends.
/// A struct rather than an enum, so that new reasons can be added without breaking callers.
package struct SessionSendError: Error, Hashable, Sendable, CustomStringConvertible {
    package struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case noPeers, notConnected, messageTooLarge, queueFull, datagramsUnsupported
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        package static let noPeers = Code(.noPeers)
        package static let notConnected = Code(.notConnected)
        package static let messageTooLarge = Code(.messageTooLarge)
        /// The peers' send queues are full (`maximumQueuedBytesPerPeer`).
        package static let queueFull = Code(.queueFull)
        /// The peers announced no datagram port, so unreliable messages cannot reach them.
        package static let datagramsUnsupported = Code(.datagramsUnsupported)

        package var description: String { "\(base)" }
    }

    package let code: Code
    /// Identifiers of the peers the refusal is about (not connected, queue full, no datagrams).
    package let peers: [Bytes16]
    /// The refused message's size, for `messageTooLarge`.
    package let messageSize: Int?

    private init(_ code: Code, peers: [Bytes16] = [], messageSize: Int? = nil) {
        self.code = code
        self.peers = peers
        self.messageSize = messageSize
    }

    package static let noPeers = SessionSendError(.noPeers)
    package static func notConnected(_ peers: [Bytes16]) -> SessionSendError { SessionSendError(.notConnected, peers: peers) }
    package static func messageTooLarge(_ size: Int) -> SessionSendError { SessionSendError(.messageTooLarge, messageSize: size) }
    package static func queueFull(_ peers: [Bytes16]) -> SessionSendError { SessionSendError(.queueFull, peers: peers) }
    package static func datagramsUnsupported(_ peers: [Bytes16]) -> SessionSendError {
        SessionSendError(.datagramsUnsupported, peers: peers)
    }

    package var description: String {
        switch code {
        case .noPeers: "no peers given"
        case .messageTooLarge: "message of \(messageSize ?? 0) bytes is too large"
        default: "\(code): \(peers.count) peer(s)"
        }
    }
}
