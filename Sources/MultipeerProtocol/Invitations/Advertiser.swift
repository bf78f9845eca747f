import MultipeerWire

/// What an advertiser needs to know about the session its application chose for an invitation.
package struct InvitingSession: Sendable {
    /// Peers the session has connected now. (One connecting meanwhile can still make the
    /// session full: its core then refuses the inviter's HELLO with sessionFull.)
    package let members: Int
    /// The preamble the session's connections send: its encryption preference and identity.
    package let preamble: Preamble

    package init(members: Int, preamble: Preamble) {
        self.members = members
        self.preamble = preamble
    }
}

/// The advertiser's side of invitations (docs/PROTOCOL.md §7.2), sans-I/O: which pending
/// invitation connection to shed, what each invitation is answered, and when an answer is too
/// late to send. The shell accepts connections, asks the application, makes connection data and
/// sends what this decides; the connection machine checks the frames and runs the answer's
/// deadline (`InvitationTiming.advertiserWait`).
package struct Advertiser<ID: Hashable & Comparable> {
    /// Invitation connections held at once, and from one source (`PendingSource`).
    package static var maximumPending: Int { 16 }
    package static var maximumPendingPerSource: Int { 4 }

    package enum Action: Equatable {
        /// Close this connection (shed to make room, or answered).
        case close(ID)
        /// Ask the application about this invitation; its answer comes to `appAnswered`.
        case askApplication(ID)
        /// The application accepted into a session with room: make connection data for the
        /// inviter and hand it to `connectionDataMade`.
        case makeConnectionData(ID, for: WirePeerID)
        /// Send this answer on the connection (the machine then closes it).
        case answer(ID, InvitationAnswer)
    }

    private enum Stage {
        /// Connected; no INVITATION yet.
        case connected
        /// The application is asked.
        case asked(InvitationRequest)
        /// Accepted; connection data is being made.
        case makingData(InvitationRequest)
        /// Answered; the connection is closing.
        case answered
    }

    private var pending: PendingConnections<ID>
    private var stages: [ID: Stage] = [:]

    package init() {
        pending = PendingConnections(limit: Self.maximumPending, perSourceLimit: Self.maximumPendingPerSource)
    }

    /// Connections held, answered or not.
    package var count: Int { stages.count }

    /// A new invitation connection. May shed another (never this one).
    package mutating func accepted(_ id: ID, from source: PendingSource, progress: (ID) -> PendingProgress) -> [Action] {
        stages[id] = .connected
        guard let shed = pending.accepted(id, from: source, progress: progress) else { return [] }
        return [.close(shed)]
    }

    /// Out of file descriptors: shed one pending connection, if any, to make room.
    package mutating func shedOne(progress: (ID) -> PendingProgress) -> [Action] {
        guard let shed = pending.shedOne(progress: progress) else { return [] }
        return [.close(shed)]
    }

    /// The connection closed, for any reason; anything still to come for it is dropped.
    package mutating func closed(_ id: ID) {
        pending.remove(id)
        stages[id] = nil
    }

    /// The inviter's INVITATION arrived.
    package mutating func invitationReceived(_ request: InvitationRequest, on id: ID) -> [Action] {
        guard case .connected = stages[id] else { return [] }
        stages[id] = .asked(request)
        return [.askApplication(id)]
    }

    /// The application's answer: decline, or accept into `session`. Without a session an
    /// acceptance is a decline. Accepting is refused for the session's own reasons first:
    /// no room for another member, or encryption the inviter's session cannot agree to.
    package mutating func appAnswered(_ id: ID, accept: Bool, into session: InvitingSession?) -> [Action] {
        guard case .asked(let request) = stages[id] else { return [] }  // too late: timed out or closed
        guard accept, let session else { return answer(id, .declined) }
        if let refusal = Self.refusal(of: request, into: session) { return answer(id, refusal) }
        stages[id] = .makingData(request)
        return [.makeConnectionData(id, for: request.peer)]
    }

    /// The session made connection data for the inviter (nil: it could not, and the
    /// invitation is declined).
    package mutating func connectionDataMade(_ id: ID, _ data: ConnectionData?) -> [Action] {
        guard case .makingData = stages[id] else { return [] }
        guard let data, let answer = try? InvitationAnswer(.accepted, connectionData: data) else { return self.answer(id, .declined) }
        stages[id] = .answered
        return [.answer(id, answer)]
    }

    /// What the advertiser's listener admits: invitation connections only (§7.2).
    package static func admission(_ hello: Hello) -> ConnectionConfiguration.Admission {
        hello.purpose == .invitation ? .admit : .refuse(.protocolError)
    }

    /// Why `session` cannot take the inviter, if it cannot.
    package static func refusal(of request: InvitationRequest, into session: InvitingSession) -> InvitationResponse? {
        guard MemberLimit.hasRoom(besides: session.members) else { return .sessionFull }
        if case .refused = Negotiation.outcome(dialer: request.inviterPreamble, listener: session.preamble) {
            return .encryptionIncompatible
        }
        return nil
    }

    private mutating func answer(_ id: ID, _ response: InvitationResponse) -> [Action] {
        stages[id] = .answered
        return [.answer(id, try! InvitationAnswer(response))]
    }
}
