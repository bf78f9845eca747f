import MultipeerCrypto
import MultipeerWire

/// Why a connection to a peer ended or never became connected.
public struct ConnectionError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// The peer speaks no protocol version we speak.
        case versionMismatch
        /// `none` met `required` (docs/PROTOCOL.md §4 rule 1).
        case encryptionIncompatible
        /// The preambles or identity presence did not match what the peer confirmed: an attacker
        /// changed them, or the peer is broken.
        case downgradeDetected
        /// The peer broke the wire protocol.
        case protocolViolation(WireError)
        case tls(SecurityError)
        /// The listener's TLS certificate is not the one its connection data named (docs/PROTOCOL.md §9.3).
        case certificateMismatch
        /// The listener's HELLO names another peer than the one we dialed (docs/PROTOCOL.md §9.3, §7.4).
        case unexpectedPeer
        /// The peer sent more than a window allowed, or pushed a window past its largest value (§7.6).
        case flowControlViolation(String)
        /// Our application rejected the peer's certificate or peer ID.
        case trustRejectedLocally
        /// Our application did not decide in time.
        case trustTimedOutLocally
        /// The peer's application rejected us, or did not decide in time.
        case trustRejectedByPeer(TrustDecision)
        /// The peer's HELLO was not admitted (unknown token, session full, ...).
        case notAdmitted(GoodbyeReason)
        /// The peer sent GOODBYE.
        case peerSaidGoodbye(GoodbyeReason)
        /// The transport closed without a GOODBYE.
        case connectionClosed
        /// The handshake did not finish in time.
        case handshakeTimedOut
        /// Nothing arrived from the peer for the dead-peer deadline.
        case peerUnresponsive
        /// We ended it (disconnect).
        case closedLocally
    }

    public let kind: Kind

    public init(_ kind: Kind) { self.kind = kind }

    /// What we tell the peer in GOODBYE, when the phase allows one.
    var goodbyeReason: GoodbyeReason {
        switch kind {
        case .protocolViolation(let error): error.goodbyeReason
        case .downgradeDetected: .downgradeDetected
        case .unexpectedPeer: .protocolError
        case .flowControlViolation: .flowControlError
        case .notAdmitted(let reason): reason
        case .handshakeTimedOut, .trustTimedOutLocally, .peerUnresponsive: .timedOut
        case .trustRejectedLocally: .trustRejected
        case .tls: .internalError
        // certificateMismatch ends the connection before any frame (docs/PROTOCOL.md §9.3).
        case .closedLocally, .connectionClosed, .peerSaidGoodbye, .trustRejectedByPeer, .versionMismatch,
            .encryptionIncompatible, .certificateMismatch:
            .normal
        }
    }

    public var description: String {
        switch kind {
        case .versionMismatch: "no common protocol version"
        case .encryptionIncompatible: "encryption preferences incompatible (none with required)"
        case .downgradeDetected: "negotiation was tampered with (downgrade detected)"
        case .protocolViolation(let error): "peer violated the protocol: \(error)"
        case .tls(let error): "TLS: \(error)"
        case .certificateMismatch: "the listener's certificate is not the one its connection data named"
        case .unexpectedPeer: "the listener is not the peer that was dialed (its HELLO names another peer ID)"
        case .flowControlViolation(let rule): "peer broke flow control: \(rule)"
        case .trustRejectedLocally: "the certificate handler rejected the peer"
        case .trustTimedOutLocally: "the certificate handler did not answer in time"
        case .trustRejectedByPeer(let decision): "the peer's certificate handler answered \(decision)"
        case .notAdmitted(let reason): "not admitted: \(reason)"
        case .peerSaidGoodbye(let reason): "peer said goodbye: \(reason)"
        case .connectionClosed: "connection closed"
        case .handshakeTimedOut: "handshake timed out"
        case .peerUnresponsive: "the peer stopped answering"
        case .closedLocally: "disconnected"
        }
    }
}
