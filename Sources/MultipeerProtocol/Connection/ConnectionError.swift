import MultipeerCrypto
import MultipeerWire

/// Why a connection to a peer ended or never became connected.
package struct ConnectionError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What happened, with the details that go with it. A struct rather than an enum, so that new
    /// kinds can be added without breaking callers: switch over `code`.
    package struct Kind: Hashable, Sendable {
        package let code: Code
        /// The GOODBYE reason, for `notAdmitted` and `peerSaidGoodbye`.
        package let goodbyeReason: GoodbyeReason?
        /// The broken rule, for `protocolViolation`.
        package let wireError: WireError?
        /// OpenSSL's complaint, for `tls`.
        package let securityError: SecurityError?
        /// The peer's answer, for `trustRejectedByPeer`.
        package let trustDecision: TrustDecision?
        /// The broken rule in words, for `flowControlViolation`.
        package let rule: String?

        private init(
            _ code: Code, goodbyeReason: GoodbyeReason? = nil, wireError: WireError? = nil, securityError: SecurityError? = nil,
            trustDecision: TrustDecision? = nil, rule: String? = nil
        ) {
            self.code = code
            self.goodbyeReason = goodbyeReason
            self.wireError = wireError
            self.securityError = securityError
            self.trustDecision = trustDecision
            self.rule = rule
        }

        package static let versionMismatch = Kind(.versionMismatch)
        package static let encryptionIncompatible = Kind(.encryptionIncompatible)
        package static let downgradeDetected = Kind(.downgradeDetected)
        package static func protocolViolation(_ error: WireError) -> Kind { Kind(.protocolViolation, wireError: error) }
        package static func tls(_ error: SecurityError) -> Kind { Kind(.tls, securityError: error) }
        package static let certificateMismatch = Kind(.certificateMismatch)
        package static let unexpectedPeer = Kind(.unexpectedPeer)
        package static func flowControlViolation(_ rule: String) -> Kind { Kind(.flowControlViolation, rule: rule) }
        package static let trustRejectedLocally = Kind(.trustRejectedLocally)
        package static let trustTimedOutLocally = Kind(.trustTimedOutLocally)
        package static func trustRejectedByPeer(_ decision: TrustDecision) -> Kind { Kind(.trustRejectedByPeer, trustDecision: decision) }
        package static func notAdmitted(_ reason: GoodbyeReason) -> Kind { Kind(.notAdmitted, goodbyeReason: reason) }
        package static func peerSaidGoodbye(_ reason: GoodbyeReason) -> Kind { Kind(.peerSaidGoodbye, goodbyeReason: reason) }
        package static let connectionClosed = Kind(.connectionClosed)
        package static let handshakeTimedOut = Kind(.handshakeTimedOut)
        package static let peerUnresponsive = Kind(.peerUnresponsive)
        package static let closedLocally = Kind(.closedLocally)
        package static let invitationEnded = Kind(.invitationEnded)
    }

    package struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case versionMismatch, encryptionIncompatible, downgradeDetected, protocolViolation, tls
            case certificateMismatch, unexpectedPeer, flowControlViolation, trustRejectedLocally
            case trustTimedOutLocally, trustRejectedByPeer, notAdmitted, peerSaidGoodbye, connectionClosed
            case handshakeTimedOut, peerUnresponsive, closedLocally, invitationEnded
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The peer speaks no protocol version we speak.
        package static let versionMismatch = Code(.versionMismatch)
        /// `none` met `required` (docs/PROTOCOL.md §4 rule 1).
        package static let encryptionIncompatible = Code(.encryptionIncompatible)
        /// The preambles or identity presence did not match what the peer confirmed: an attacker
        /// changed them, or the peer is broken.
        package static let downgradeDetected = Code(.downgradeDetected)
        /// The peer broke the wire protocol.
        package static let protocolViolation = Code(.protocolViolation)
        package static let tls = Code(.tls)
        /// The listener's TLS certificate is not the one its connection data named (docs/PROTOCOL.md §9.3).
        package static let certificateMismatch = Code(.certificateMismatch)
        /// The listener's HELLO names another peer than the one we dialed (docs/PROTOCOL.md §9.3, §7.4).
        package static let unexpectedPeer = Code(.unexpectedPeer)
        /// The peer sent more than a window allowed, or pushed a window past its largest value (§7.6).
        package static let flowControlViolation = Code(.flowControlViolation)
        /// Our application rejected the peer's certificate or peer ID.
        package static let trustRejectedLocally = Code(.trustRejectedLocally)
        /// Our application did not decide in time.
        package static let trustTimedOutLocally = Code(.trustTimedOutLocally)
        /// The peer's application rejected us, or did not decide in time.
        package static let trustRejectedByPeer = Code(.trustRejectedByPeer)
        /// The peer's HELLO was not admitted (unknown token, session full, ...).
        package static let notAdmitted = Code(.notAdmitted)
        /// The peer sent GOODBYE.
        package static let peerSaidGoodbye = Code(.peerSaidGoodbye)
        /// The transport closed without a GOODBYE.
        package static let connectionClosed = Code(.connectionClosed)
        /// The handshake did not finish in time.
        package static let handshakeTimedOut = Code(.handshakeTimedOut)
        /// Nothing arrived from the peer for the dead-peer deadline.
        package static let peerUnresponsive = Code(.peerUnresponsive)
        /// We ended it (disconnect).
        package static let closedLocally = Code(.closedLocally)
        /// An invitation connection ended as it should, with its answer (docs/PROTOCOL.md §7.2).
        package static let invitationEnded = Code(.invitationEnded)

        package var description: String { "\(base)" }
    }

    package let kind: Kind

    package init(_ kind: Kind) { self.kind = kind }

    package var code: Code { kind.code }

    /// The link was lost without either side ending it (no GOODBYE): what link recovery
    /// recovers from (docs/PROTOCOL.md §7.9).
    package var isLinkLoss: Bool { code == .connectionClosed || code == .peerUnresponsive }

    /// What we tell the peer in GOODBYE, when the phase allows one.
    var goodbyeReason: GoodbyeReason {
        switch kind.code {
        case .protocolViolation: kind.wireError?.goodbyeReason ?? .protocolError
        case .downgradeDetected: .downgradeDetected
        case .unexpectedPeer: .protocolError
        case .flowControlViolation: .flowControlError
        case .notAdmitted: kind.goodbyeReason ?? .normal
        case .handshakeTimedOut, .trustTimedOutLocally, .peerUnresponsive: .timedOut
        case .trustRejectedLocally: .trustRejected
        case .tls: .internalError
        // certificateMismatch ends the connection before any frame (docs/PROTOCOL.md §9.3).
        default: .normal
        }
    }

    package var description: String {
        switch kind.code {
        case .versionMismatch: "no common protocol version"
        case .encryptionIncompatible: "encryption preferences incompatible (none with required)"
        case .downgradeDetected: "negotiation was tampered with (downgrade detected)"
        case .protocolViolation: "peer violated the protocol: \(kind.wireError.map { "\($0)" } ?? "?")"
        case .tls: "TLS: \(kind.securityError.map { "\($0)" } ?? "?")"
        case .certificateMismatch: "the listener's certificate is not the one its connection data named"
        case .unexpectedPeer: "the listener is not the peer that was dialed (its HELLO names another peer ID)"
        case .flowControlViolation: "peer broke flow control: \(kind.rule ?? "?")"
        case .trustRejectedLocally: "the certificate handler rejected the peer"
        case .trustTimedOutLocally: "the certificate handler did not answer in time"
        case .trustRejectedByPeer: "the peer's certificate handler answered \(kind.trustDecision.map { "\($0)" } ?? "?")"
        case .notAdmitted: "not admitted: \(kind.goodbyeReason.map { "\($0)" } ?? "?")"
        case .peerSaidGoodbye: "peer said goodbye: \(kind.goodbyeReason.map { "\($0)" } ?? "?")"
        case .connectionClosed: "connection closed"
        case .handshakeTimedOut: "handshake timed out"
        case .peerUnresponsive: "the peer stopped answering"
        case .closedLocally: "disconnected"
        case .invitationEnded: "the invitation was answered"
        default: "\(kind.code)"
        }
    }
}
