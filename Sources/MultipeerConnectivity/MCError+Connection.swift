import MultipeerSession
import MultipeerWire
import MultipeerProtocol

extension MCError {
    /// The app-facing reason for a connection that ended; nil for a normal goodbye or our own disconnect.
    init?(connectionError error: ConnectionError) {
        switch error.code {
        case .closedLocally:
            return nil
        case .peerSaidGoodbye where error.kind.goodbyeReason == .normal:
            return nil
        case .handshakeTimedOut, .trustTimedOutLocally, .peerUnresponsive:
            self.init(.timedOut, reason: error.description)
        case .trustRejectedLocally, .trustRejectedByPeer:
            self.init(.cancelled, reason: error.description)
        case .certificateMismatch, .unexpectedPeer:
            // Stale or forged connection data, or someone in between: no certificate handler was
            // asked, so not .cancelled; the connection simply did not happen.
            self.init(.notConnected, reason: error.description)
        case .peerSaidGoodbye, .notAdmitted:
            self.init(refusal: error.kind.goodbyeReason ?? .normal)
        default:
            self.init(.notConnected, reason: error.description)
        }
    }

    /// A peer's or our own refusal, by GOODBYE reason.
    init(refusal reason: GoodbyeReason) {
        switch reason {
        case .sessionFull: self.init(.unavailable, reason: "the session already has \(kMCSessionMaximumNumberOfPeers) peers")
        case .unknownToken: self.init(.invalidParameter, reason: "the connection data was unknown, used, or expired")
        case .timedOut: self.init(.timedOut, reason: "the peer timed out")
        default: self.init(.notConnected, reason: "connection ended: \(reason)")
        }
    }
}
