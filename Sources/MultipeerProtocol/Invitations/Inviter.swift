import MultipeerWire

/// One invitation from the inviter's side (docs/PROTOCOL.md §7.2), sans-I/O: which of the
/// invitee's addresses to dial next, whether an acceptance may be followed, and how the
/// invitation ended. The shell dials, runs the timer and feeds
/// back what each invitation connection did; every decision is here.
package struct Inviter {
    package enum Action: Equatable {
        /// Open an invitation connection to the invitee's address at this index.
        case dial(addressIndex: Int)
        /// Accepted: dial the invitee's session with its connection data. Its link-local
        /// endpoints are on the link of the address the invitation went to (§9.2).
        case connect(ConnectionData, viaAddressIndex: Int)
        /// The invitation ended; nothing follows.
        case finished(InvitationOutcome)
    }

    package let invitee: WirePeerID
    package let localPeer: Bytes16
    private let addressCount: Int
    /// The address being tried; nil before `start` and after the end.
    private var current: Int?
    /// Whether the current address took the connection: from then on its answer (or its
    /// end) decides, and no other address is tried.
    private var connected = false
    private var lastFailure = "no address to dial"
    package private(set) var outcome: InvitationOutcome?

    package init(invitee: WirePeerID, localPeer: Bytes16, addressCount: Int) {
        self.invitee = invitee
        self.localPeer = localPeer
        self.addressCount = max(addressCount, 0)
    }

    package mutating func start() -> [Action] {
        guard current == nil, outcome == nil else { return [] }
        return dial(0)
    }

    /// The dial to the current address failed before any connection: the next one may work.
    package mutating func dialFailed(_ why: String) -> [Action] {
        guard let index = current, outcome == nil, !connected else { return [] }
        lastFailure = why
        return dial(index + 1)
    }

    /// The current address took the connection. Its answer is due within the inviter's
    /// timeout (`InvitationTiming.inviterWait`, run by the connection's shell).
    package mutating func connectionOpened() -> [Action] {
        if current != nil, outcome == nil { connected = true }
        return []
    }

    /// The answer. An acceptance is followed only with connection data the invitee made, for us.
    package mutating func answered(_ answer: InvitationAnswer) -> [Action] {
        guard let index = current, outcome == nil else { return [] }
        connected = true  // only an open connection answers, whichever news came first
        switch answer.response {
        case .declined: return finish(.declined)
        case .timedOut: return finish(.timedOut)
        case .sessionFull: return finish(.sessionFull)
        case .encryptionIncompatible: return finish(.encryptionIncompatible)
        case .accepted:
            guard let data = answer.connectionData else { return finish(.invalidAnswer("an acceptance without connection data")) }
            guard data.peerID.identifier == invitee.identifier else { return finish(.invalidAnswer("the connection data was made by another peer")) }
            guard data.forPeer == localPeer else { return finish(.invalidAnswer("the connection data was made for another peer")) }
            return [.connect(data, viaAddressIndex: index)] + finish(.accepted)
        }
    }

    /// The invitation connection ended without an answer: on the answer deadline (or the
    /// handshake's), `timedOut`; for any other reason, `unreachable`.
    package mutating func connectionEnded(_ error: ConnectionError) -> [Action] {
        guard current != nil, outcome == nil else { return [] }
        connected = true  // only an open connection reports its end
        switch error.code {
        case .invitationEnded: return []  // after the answer, which decided
        case .handshakeTimedOut: return finish(.timedOut)
        default: return finish(.unreachable("\(error)"))
        }
    }

    /// The transport of an open connection closed and the connection reported nothing first.
    /// (A dial that never connected is reported by `dialFailed` instead.)
    package mutating func transportClosed() -> [Action] {
        guard current != nil, outcome == nil else { return [] }
        connected = true
        return finish(.unreachable("the connection closed without an answer"))
    }

    private mutating func dial(_ index: Int) -> [Action] {
        guard index < addressCount else { return finish(.unreachable(lastFailure)) }
        current = index
        connected = false
        return [.dial(addressIndex: index)]
    }

    private mutating func finish(_ outcome: InvitationOutcome) -> [Action] {
        self.outcome = outcome
        return [.finished(outcome)]
    }
}
