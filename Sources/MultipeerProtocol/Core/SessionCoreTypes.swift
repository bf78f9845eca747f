import Logging
import MultipeerWire
import NIOCore

/// One connection (dialed or accepted) within a session core.
package struct LinkID: Hashable, Comparable, Sendable, CustomStringConvertible {
    let raw: Int
    package static func < (lhs: LinkID, rhs: LinkID) -> Bool { lhs.raw < rhs.raw }
    package var description: String { "link \(raw)" }
}

/// Deferred work the core asks its shell to schedule; handed back through `timerFired`.
package enum SessionTimer: Hashable {
    /// Dial an introduced peer again: our introduction may have overtaken the peer's.
    case redialIntroduced(DialPlan, attempt: Int)
    /// The peer kept its own connection to us and has not said HELLO yet; give up at this point.
    case awaitPeersConnection(WirePeerID, ConnectionError)
    /// Link recovery (docs/PROTOCOL.md §7.9): dial the suspended member again, unless a
    /// connection to it is already under way; `suspension` tells one loss from the next.
    case redialSuspended(WirePeerID, suspension: Int, attempt: Int)
    /// The grace period of a suspension ended: the member leaves unless it came back.
    case recoveryExpired(WirePeerID, suspension: Int)
    /// Acknowledge what the member delivered, if nothing else did meanwhile.
    case acknowledge(WirePeerID)

    var peer: WirePeerID {
        switch self {
        case .redialIntroduced(let plan, _): plan.peer
        case .awaitPeersConnection(let peer, _), .redialSuspended(let peer, _, _), .recoveryExpired(let peer, _), .acknowledge(let peer): peer
        }
    }

    /// A connection attempt the app could call off (`cancelConnect`); recovery's timers are not.
    var isConnectionAttempt: Bool {
        switch self {
        case .redialIntroduced, .awaitPeersConnection: true
        case .redialSuspended, .recoveryExpired, .acknowledge: false
        }
    }
}

/// What the session core asks its shell to do, in order.
package enum SessionAction {
    /// Open a TCP connection for `link` and run the handshake the plan describes.
    case dial(LinkID, DialPlan)
    case sendFrame(Frame, on: LinkID)
    /// Say GOODBYE with this reason and close.
    case close(LinkID, GoodbyeReason)
    /// End the connection for this error (GOODBYE with its reason; the error is reported).
    case abort(LinkID, ConnectionError)
    /// Close the socket; the core has already forgotten the link and reports nothing more.
    case drop(LinkID)
    /// Close the socket without GOODBYE, which would end the session: the link is lost, and the
    /// member recovers (docs/PROTOCOL.md §7.9). The core has already forgotten the link.
    case sever(LinkID)
    case report(WirePeerID, PeerConnectionState)
    /// A connection was refused before either app was asked (session full, stale token).
    case refused(WirePeerID, GoodbyeReason)
    /// The peer is connected: reliable messages may go to it on this link.
    case memberJoined(WirePeerID, LinkID, acceptsDatagrams: Bool)
    /// The peer's active link is gone: nothing more can be sent to it.
    case memberLeft(Bytes16)
    /// The member's link was lost and it is recovering (docs/PROTOCOL.md §7.9): it stays a member,
    /// messages to it are kept (`sendingReliable`), and no link carries it until `memberResumed`.
    case memberSuspended(WirePeerID)
    /// A new link carries the suspended member: set it up as for `memberJoined`, then send these
    /// messages on it, in order, before any other.
    case memberResumed(WirePeerID, LinkID, acceptsDatagrams: Bool, resend: [ByteBuffer])
    /// The member acknowledged messages it was kept for: this much of the send budget comes back
    /// (`DeliveryLedger.charge`).
    case acknowledged(Bytes16, charge: Int)
    case schedule(SessionTimer, at: NIODeadline)
}

/// The session's rules, without sockets.
package struct SessionCoreConfiguration {
    var localPeer: WirePeerID
    var handshakeTimeout: TimeAmount
    var maximumPendingConnections: Int
    /// Of those, how many may come from one source (`PendingSource`).
    var maximumPendingConnectionsPerSource: Int
    var datagramLimits: DatagramPeerState.Limits
    /// Each member link's channel windows and resource limits.
    var channelLimits: ChannelMux.Limits
    var logger: Logger
    /// Whether we accept connections (our HELLO's listenPort is not 0). A side that does not
    /// dials every member it is introduced to (docs/PROTOCOL.md §7.4).
    var acceptsConnections = true

    /// How often a dial to an introduced peer is retried after `unknownToken`, and the first
    /// delay, doubled for each retry after it: the introduction the peer waits for may be held up
    /// by TCP retransmissions on a lossy link (5 retries: 7.75 s in all).
    var introducedDialRetries = 5
    var introducedDialRetryDelay = TimeAmount.milliseconds(250)

    func introducedDialDelay(beforeAttempt attempt: Int) -> TimeAmount {
        introducedDialRetryDelay * Int64(1 << min(max(attempt - 1, 0), 16))
    }
    /// Link recovery for version 2 members over TLS (docs/PROTOCOL.md §7.9); `.off`: a lost link
    /// ends the member at once, as with version 1.
    var recovery: RecoveryPolicy

    package init(
        localPeer: WirePeerID, handshakeTimeout: TimeAmount, maximumPendingConnections: Int,
        maximumPendingConnectionsPerSource: Int, datagramLimits: DatagramPeerState.Limits, channelLimits: ChannelMux.Limits,
        logger: Logger, acceptsConnections: Bool = true, recovery: RecoveryPolicy = .off
    ) {
        self.localPeer = localPeer
        self.handshakeTimeout = handshakeTimeout
        self.maximumPendingConnections = maximumPendingConnections
        self.maximumPendingConnectionsPerSource = maximumPendingConnectionsPerSource
        self.datagramLimits = datagramLimits
        self.channelLimits = channelLimits
        self.logger = logger
        self.acceptsConnections = acceptsConnections
        self.recovery = recovery
    }
}
