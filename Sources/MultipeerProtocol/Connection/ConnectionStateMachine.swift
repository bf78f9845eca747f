import MultipeerCrypto
import MultipeerWire
import NIOCore

/// What the application is asked before a peer may become connected.
package struct PeerTrustRequest: Sendable {
    package let peer: WirePeerID
    /// Leaf first; nil when the peer has no identity (an ephemeral TLS certificate is never shown).
    package let certificateChain: [Certificate]?
    package let hello: Hello
    /// The 6-digit code both sides of this connection show (docs/PROTOCOL.md §7.3); different on
    /// the two sides of a man in the middle.
    package let pairingCode: String
    /// TLS protects the connection; without it the code binds no keys and proves nothing.
    package let isEncrypted: Bool
}

/// A connection that both sides have accepted.
package struct EstablishedConnection: Sendable {
    package let peer: WirePeerID
    package let peerHello: Hello
    package let certificateChain: [Certificate]?
    package let isEncrypted: Bool
    package let protocolVersion: UInt8
    package let cipherSuite: String?
    /// Version 2 over TLS, the connection that makes the member: what it leaves for resuming the
    /// member later (docs/PROTOCOL.md §7.9); nil on earlier versions, in plaintext, and on a
    /// resumption connection (the session keeps its first keys).
    package let resumptionKeys: ResumptionKeys?
    /// A resumption connection: how many of our messages the peer delivered in the session it
    /// resumed; nil on a new member's connection.
    package let resumedPeerDelivered: UInt64?
}

/// An invitation, as the advertiser's application is asked (docs/PROTOCOL.md §7.2).
package struct InvitationRequest: Sendable {
    package let peer: WirePeerID
    package let invitation: Invitation
    /// The inviter's preamble: its session's encryption preference and whether it has an
    /// identity, so the application's chosen session can be checked against it.
    package let inviterPreamble: Preamble

    /// How long this advertiser waits for its application: the inviter's timeout, capped.
    package var answerWait: TimeAmount { InvitationTiming.advertiserWait(timeoutMilliseconds: invitation.timeoutMilliseconds) }
}

package enum ConnectionAction {
    /// Bytes for the socket, in order.
    case send(ByteBuffer)
    /// Ask the application; answer with `trustDecided(accepted:)` or `trustTimedOut()`.
    case evaluateTrust(PeerTrustRequest)
    case established(EstablishedConnection)
    /// A frame for the session layer; only ever after `established`.
    case deliver(Frame)
    /// Close the socket once the bytes already sent are flushed.
    case close(ConnectionError)
    /// Listener of an invitation connection: ask the application; answer with `answerInvitation`
    /// or `invitationTimedOut` within the invitation's timeout.
    case invitationReceived(InvitationRequest)
    /// Dialer of an invitation connection: the listener has answered HELLO; its answer is due
    /// within this many milliseconds.
    case awaitingInvitationAnswer(milliseconds: UInt32)
    /// Dialer of an invitation connection: the answer; the connection closes next.
    case invitationAnswered(InvitationAnswer)
    /// Listener: the dialer's HELLO; answer with `admitted` (the session decides whether this
    /// purpose, token and peer may join). Nothing after the HELLO is read until then.
    case admissionRequested(Hello)
}

/// One connection's establishment and framing, sans-I/O (docs/PROTOCOL.md §3-§7): preamble,
/// negotiation, TLS, HELLO with the preamble echo, the trust step, then frames.
/// Inputs are bytes, the application's trust answer and timeouts; outputs are actions.
/// No application frame is sent or delivered before both sides have accepted each other.
package struct ConnectionStateMachine {
    private struct Negotiated {
        let version: UInt8
        let peerPreamble: Preamble
        let echo: Bytes16
    }

    private struct Session {
        let transport: SecureTransport
        let negotiated: Negotiated
        let peerChain: [Certificate]?
    }

    /// Between HELLO and the trust step: the pairing nonces being exchanged (§7.3).
    private struct Pairing {
        var session: Session
        let peerHello: Hello
        /// Listener: the dialer's commitment, once read.
        var peerCommitment: SHA256Digest?
    }

    private struct Trust {
        var session: Session
        let peerHello: Hello
        var localAccepted = false
        var peerAccepted = false
    }

    /// A resumption connection after HELLO: waiting for the peer's RESUME (docs/PROTOCOL.md §7.9).
    private struct Resuming {
        let session: Session
        let peerHello: Hello
        let grant: ConnectionConfiguration.ResumptionGrant
    }

    private enum State {
        case idle
        case awaitingPreamble(ByteBuffer)
        case tlsHandshake(TLSEngine, Negotiated)
        case awaitingHello(Session)
        /// Listener: the dialer's HELLO is with the session (`admissionRequested`); frames after
        /// it wait in the decoder until `admitted`.
        case admitting(Session, peerHello: Hello)
        case pairing(Pairing)
        case trusting(Trust)
        case resuming(Resuming)
        case connected(Session, peerHello: Hello)
        /// An invitation connection after HELLO: the listener waiting for INVITATION and then for
        /// its application; the dialer waiting for INVITATION_RESPONSE (docs/PROTOCOL.md §7.2).
        case invitation(Session, peerHello: Hello, received: Bool)
        case closed
        /// Placeholder while a case's payload is being mutated, to avoid copy-on-write.
        case modifying
    }

    package let configuration: ConnectionConfiguration
    private let localPreamble: Preamble
    private var state: State = .idle {
        didSet {
            // The placeholder of an in-place update says nothing about progress.
            if case .modifying = state { return }
            establishmentProgress = Self.progress(of: state)
        }
    }
    /// The peer's channels and the connection windows; consulted once connected.
    private(set) var channels: ChannelTable
    /// Frames once a session has begun (the states that hold a `Session`). Kept here, not in the
    /// state's payload: mutated through an enum payload, its buffers were shared with the
    /// switch's copy, and every payload write copied the storage (one extra copy of every byte).
    private var decoder = FrameDecoder()
    /// This side's pairing nonce, fresh per connection (§7.3).
    private let pairingNonce: PairingNonce
    /// Bytes of answers sent so far (PONG, channel refusals, window given back for dropped data):
    /// replies the peer provoked, which its reading must keep up with.
    package private(set) var replyByteCount = 0

    package init(configuration: ConnectionConfiguration) throws(WireError) {
        self.configuration = configuration
        channels = ChannelTable(weAreDialer: configuration.role == .dialer)
        localPreamble = try Preamble(
            maxVersion: configuration.maxProtocolVersion, encryptionPreference: configuration.encryptionPreference,
            hasIdentity: configuration.hasIdentity)
        pairingNonce = try PairingNonce(bytes: configuration.randomBytes(PairingNonce.byteCount))
    }

    package var isConnected: Bool {
        if case .connected = state { return true }
        return false
    }

    /// How far establishment got, for shedding the least advanced connections first under load:
    /// 0 before the peer's preamble, 1 in TLS, 2 awaiting HELLO or admission, 3 in the trust
    /// step, 4 connected. Stored, not computed: a listener reads it for every pending connection
    /// on every accept, and a computed property read from another module copies the machine.
    package private(set) var establishmentProgress = 0

    private static func progress(of state: State) -> Int {
        switch state {
        case .idle, .awaitingPreamble, .modifying: 0
        case .tlsHandshake: 1
        case .awaitingHello, .admitting, .pairing: 2
        case .trusting, .invitation, .resuming: 3
        case .connected, .closed: 4
        }
    }

    /// Listener, while the session decides on the dialer's HELLO: SHA-256 of the leaf the dialer
    /// showed (nil without one), so that admission can check it before anything else happens.
    package var admittingPeerCertificateFingerprint: [UInt8]? {
        guard case .admitting(let session, _) = state else { return nil }
        return session.peerChain?.first?.sha256Fingerprint
    }

    package var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    /// The TLS engine once negotiation chose TLS (for exporter keys and counters).
    package var tlsEngine: TLSEngine? {
        switch state {
        case .tlsHandshake(let engine, _): engine
        case .awaitingHello(let session), .admitting(let session, _), .connected(let session, _), .invitation(let session, _, _):
            session.transport.engine
        case .pairing(let pairing): pairing.session.transport.engine
        case .trusting(let trust): trust.session.transport.engine
        case .resuming(let resuming): resuming.session.transport.engine
        case .idle, .awaitingPreamble, .closed, .modifying: nil
        }
    }

    // MARK: Inputs

    /// The transport is up. A dialer sends its preamble now; a listener once it has read the
    /// dialer's (docs/PROTOCOL.md §3), so a connection that never sends costs it no write.
    package mutating func start() -> [ConnectionAction] {
        guard case .idle = state else { return [] }
        state = .awaitingPreamble(ByteBuffer())
        return configuration.role == .dialer ? [.send(localPreambleBytes)] : []
    }

    private var localPreambleBytes: ByteBuffer {
        var bytes = ByteBuffer()
        localPreamble.encode(into: &bytes)
        return bytes
    }

    package mutating func receive(_ bytes: ByteBuffer) -> [ConnectionAction] {
        switch state {
        case .idle, .closed, .modifying:
            return []
        case .awaitingPreamble(var buffered):
            buffered.writeImmutableBuffer(bytes)
            guard buffered.readableBytes >= WireLimits.preambleLength else {
                state = .awaitingPreamble(buffered)
                return []
            }
            let peerBytes = buffered.readSlice(length: WireLimits.preambleLength)!
            return negotiate(peerBytes: peerBytes, leftover: buffered)
        case .tlsHandshake(let engine, let negotiated):
            engine.receive(bytes)
            return advanceTLS(engine, negotiated)
        case .awaitingHello(let session), .admitting(let session, _), .connected(let session, _), .invitation(let session, _, _):
            return openAndProcess(bytes, transport: session.transport)
        case .pairing(let pairing):
            return openAndProcess(bytes, transport: pairing.session.transport)
        case .trusting(let trust):
            return openAndProcess(bytes, transport: trust.session.transport)
        case .resuming(let resuming):
            return openAndProcess(bytes, transport: resuming.session.transport)
        }
    }

    /// The advertiser's application answered the invitation: send it and close (§7.2).
    package mutating func answerInvitation(_ answer: InvitationAnswer) -> [ConnectionAction] {
        guard case .invitation(let session, _, true) = state, configuration.role == .listener else { return [] }
        var actions = sendFrame(.invitationResponse(answer), over: session.transport)
        actions += closeTransport(session.transport, ConnectionError(.invitationEnded))
        return actions
    }

    /// Listener: the application did not answer within the invitation's timeout.
    /// Dialer: no answer came within it; the invitation ends unanswered.
    package mutating func invitationTimedOut() -> [ConnectionAction] {
        guard case .invitation(let session, _, let received) = state else { return [] }
        if configuration.role == .listener {
            guard received else { return [] }
            return answerInvitation(try! InvitationAnswer(.timedOut))
        }
        return closeTransport(session.transport, ConnectionError(.handshakeTimedOut))
    }

    /// The application's answer to `.evaluateTrust`. Late answers (after a timeout or close) are ignored.
    package mutating func trustDecided(accepted: Bool) -> [ConnectionAction] {
        guard case .trusting(var trust) = state, !trust.localAccepted else { return [] }
        guard accepted else {
            var actions = sendFrame(.trust(.rejected), over: trust.session.transport)
            actions += closeTransport(trust.session.transport, ConnectionError(.trustRejectedLocally))
            return actions
        }
        trust.localAccepted = true
        var actions = sendFrame(.trust(.accepted), over: trust.session.transport)
        state = .trusting(trust)
        actions += establishIfBothAccepted()
        return actions
    }

    package mutating func trustTimedOut() -> [ConnectionAction] {
        guard case .trusting(let trust) = state, !trust.localAccepted else { return [] }
        var actions = sendFrame(.trust(.timedOut), over: trust.session.transport)
        actions += closeTransport(trust.session.transport, ConnectionError(.trustTimedOutLocally))
        return actions
    }

    /// The handshake deadline passed; harmless once connected.
    package mutating func handshakeTimedOut() -> [ConnectionAction] {
        switch state {
        case .connected, .closed, .modifying: return []
        case .invitation(_, _, let received) where received || configuration.role == .dialer:
            return []  // the invitation's own timer runs now
        default: return fail(ConnectionError(.handshakeTimedOut))
        }
    }

    /// Keepalive found the peer silent for the dead-peer deadline.
    package mutating func peerUnresponsive() -> [ConnectionAction] {
        if case .closed = state { return [] }
        // Version 2: lost, not ended, so that the session may be resumed (§7.7, §7.9).
        if case .connected(let session, _) = state, session.negotiated.version >= Hello.Purpose.resumption.sinceVersion {
            return closeTransport(session.transport, ConnectionError(.peerUnresponsive))
        }
        return fail(ConnectionError(.peerUnresponsive))
    }

    /// The socket closed under us.
    package mutating func transportClosed() -> [ConnectionAction] {
        if case .closed = state { return [] }
        state = .closed
        return [.close(ConnectionError(.connectionClosed))]
    }

    /// Ends the connection politely: GOODBYE if frames have begun, then close.
    package mutating func disconnect(reason: GoodbyeReason = .normal) -> [ConnectionAction] {
        guard let transport = frameTransport else {
            if case .closed = state { return [] }
            state = .closed
            return [.close(ConnectionError(.closedLocally))]
        }
        var actions = sendFrame(.goodbye(reason), over: transport)
        actions += closeTransport(transport, ConnectionError(.closedLocally))
        return actions
    }

    /// Ends the connection because of `error` (found by the session layer, such as an oversized
    /// message): GOODBYE with its reason if frames have begun, then close, reporting `error`.
    package mutating func abort(_ error: ConnectionError) -> [ConnectionAction] {
        if case .closed = state { return [] }
        return fail(error)
    }

    /// Seals an application frame. Only once connected. Channel frames are checked against the
    /// channel rules (docs/PROTOCOL.md §7.6) and update the table; one that breaks them is refused.
    /// With `coalescing`, a small frame may be held to share a TLS record with the frames sent
    /// after it; `flushHeld()` then owes its bytes before the connection is flushed.
    package mutating func send(_ frame: Frame, coalescing: Bool = false) throws(SendRefusal) -> [ConnectionAction] {
        guard case .connected(let session, _) = state else { throw .notConnected }
        switch frame.type {
        case .hello, .trust, .invitation, .invitationResponse, .pong, .pairingCommit, .pairingNonce, .resume:
            throw .unsupported(frame.type)
        case .acknowledge where session.negotiated.version < FrameType.acknowledge.sinceVersion:
            throw .unsupported(frame.type)
        case .goodbye, .ping, .message, .meshIntroduction, .acknowledge:
            break
        case .streamOpen, .streamData, .streamClose, .streamReset, .windowUpdate, .resourceOffer, .resourceChunk,
            .resourceComplete, .resourceCancel, .resourceAccept, .resourceReceived, .streamResume, .streamAcknowledge:
            try channels.sending(frame)
        }
        let isRefusal: Bool
        if case .streamReset(_, .refused) = frame { isRefusal = true } else { isRefusal = false }
        // A refusal answers the peer's open: a peer that opens faster than it reads must not
        // grow our memory with them (the handler stops reading past its reply backlog). So it is
        // counted as a reply, and never held.
        guard isRefusal else { return try session.transport.seal(frame, coalescing: coalescing).map(ConnectionAction.send) }
        let queuedBefore = queueHeld(session.transport)
        let sealed = try session.transport.seal(frame).map(ConnectionAction.send)
        countReply(sealed, queuedBefore: queuedBefore)
        return sealed
    }

    /// The bytes of frames `send(_:coalescing:)` held, sealed now. A TLS failure ends the connection.
    package mutating func flushHeld() -> [ConnectionAction] {
        guard case .connected(let session, _) = state else { return [] }
        do {
            return try session.transport.sealHeld().map(ConnectionAction.send)
        } catch {
            return fail(ConnectionError(.tls(error)))
        }
    }

    // MARK: Negotiation and TLS

    private mutating func negotiate(peerBytes: ByteBuffer, leftover: ByteBuffer) -> [ConnectionAction] {
        let peerPreamble: Preamble
        do {
            peerPreamble = try Preamble.decode(peerBytes)
        } catch {
            state = .closed
            return [.close(ConnectionError(.protocolViolation(error)))]
        }
        // The listener answers a well-formed preamble with its own, refusal or not, so the dialer
        // learns the outcome from both as the listener does.
        let answer: [ConnectionAction] = configuration.role == .listener ? [.send(localPreambleBytes)] : []
        return answer + negotiated(peerPreamble, leftover: leftover)
    }

    private mutating func negotiated(_ peerPreamble: Preamble, leftover: ByteBuffer) -> [ConnectionAction] {
        let dialer = configuration.role == .dialer ? localPreamble : peerPreamble
        let listener = configuration.role == .dialer ? peerPreamble : localPreamble
        let echo = Hello.echo(dialer: dialer, listener: listener)
        switch Negotiation.outcome(dialer: dialer, listener: listener) {
        case .refused(.versionMismatch):
            state = .closed
            return [.close(ConnectionError(.versionMismatch))]
        case .refused(.encryptionIncompatible):
            state = .closed
            return [.close(ConnectionError(.encryptionIncompatible))]
        case .plaintext(let version):
            // A pinned listener must show its certificate; in the clear our HELLO would give the token away.
            // Resuming needs the old session's keys, which only TLS has (§7.9).
            if configuration.expectedCertificateFingerprint != nil || configuration.resumption != nil {
                state = .closed
                return [.close(ConnectionError(.certificateMismatch))]
            }
            let negotiated = Negotiated(version: version, peerPreamble: peerPreamble, echo: echo)
            return beginFrames(Session(transport: .plaintext, negotiated: negotiated, peerChain: nil), leftover: leftover)
        case .tls(let version):
            let negotiated = Negotiated(version: version, peerPreamble: peerPreamble, echo: echo)
            let engine: TLSEngine
            do {
                engine = try TLSEngine(
                    context: configuration.tls, role: configuration.role == .dialer ? .client : .server,
                    recordsPerKeyUpdate: configuration.recordsPerKeyUpdate, recordLayer: nil, logger: configuration.logger)
            } catch {
                state = .closed
                return [.close(ConnectionError(.tls(error)))]
            }
            state = .tlsHandshake(engine, negotiated)
            engine.receive(leftover)
            return advanceTLS(engine, negotiated)
        }
    }

    private mutating func advanceTLS(_ engine: TLSEngine, _ negotiated: Negotiated) -> [ConnectionAction] {
        let progress: TLSEngine.HandshakeProgress
        do {
            progress = try engine.advanceHandshake()
        } catch {
            // Send the alert OpenSSL queued, so the peer learns why.
            var actions = engine.takeOutbound().map { [ConnectionAction.send($0)] } ?? []
            state = .closed
            actions.append(.close(ConnectionError(.tls(error))))
            return actions
        }
        var actions = engine.takeOutbound().map { [ConnectionAction.send($0)] } ?? []
        guard progress == .complete else { return actions }

        // The pin from the connection data, before our HELLO and its token go out (docs/PROTOCOL.md §9.3).
        if let expected = configuration.expectedCertificateFingerprint,
            engine.peerCertificateChain.first?.sha256Fingerprint != expected.bytes
        {
            return actions + closeTransport(.tls(engine), ConnectionError(.certificateMismatch))
        }

        // Identity presence must match the preamble (docs/PROTOCOL.md §5).
        let chain = engine.peerCertificateChain
        let peerClaimsIdentity = negotiated.peerPreamble.hasIdentity
        let session = Session(transport: .tls(engine), negotiated: negotiated, peerChain: peerClaimsIdentity ? chain : nil)
        if peerClaimsIdentity && chain.isEmpty || !peerClaimsIdentity && configuration.role == .listener && !chain.isEmpty {
            state = .awaitingHello(session)
            return actions + fail(ConnectionError(.downgradeDetected))
        }
        actions += beginFrames(session, leftover: ByteBuffer())
        return actions
    }

    /// Frames begin: send HELLO, then read whatever already arrived.
    private mutating func beginFrames(_ session: Session, leftover: ByteBuffer) -> [ConnectionAction] {
        state = .awaitingHello(session)
        let hello: Hello
        do {
            hello = try Hello(
                version: session.negotiated.version, purpose: configuration.purpose, preambleEcho: session.negotiated.echo,
                token: configuration.token, listenPort: configuration.listenPort, datagramPort: configuration.datagramPort,
                datagramReceiverID: configuration.datagramReceiverID, peerID: configuration.localPeer)
        } catch {
            return fail(ConnectionError(.protocolViolation(error)))
        }
        var actions = sendFrame(.hello(hello), over: session.transport)
        if configuration.role == .dialer, configuration.purpose == .resumption {
            // No pairing or trust step: the proof stands for both (§7.9).
            guard let grant = configuration.resumption, session.negotiated.version >= Hello.Purpose.resumption.sinceVersion,
                let resume = resumeFrame(grant, session)
            else {
                return actions + fail(ConnectionError(.protocolViolation(WireError(.invalidValue, "a resumption dial without its session"))))
            }
            actions += sendFrame(resume, over: session.transport)
            actions += openAndProcess(leftover, transport: session.transport)
            return actions
        }
        if configuration.role == .dialer, configuration.purpose != .invitation {
            // Committed to before the listener's nonce can be known (§7.3).
            let commitment = try! SHA256Digest(bytes: PairingCode.commitment(to: pairingNonce.bytes))
            actions += sendFrame(.pairingCommit(commitment), over: session.transport)
        }
        if configuration.role == .dialer, configuration.purpose == .invitation {
            guard let invitation = configuration.invitation else {
                return actions + fail(ConnectionError(.protocolViolation(WireError(.invalidValue, "an invitation dial without an INVITATION"))))
            }
            actions += sendFrame(.invitation(invitation), over: session.transport)
        }
        actions += openAndProcess(leftover, transport: session.transport)
        return actions
    }

    // MARK: Frames

    private mutating func openAndProcess(_ bytes: ByteBuffer, transport: SecureTransport) -> [ConnectionAction] {
        var actions: [ConnectionAction] = []
        _ = withDecoder { transport.receive(bytes, decoder: &$0) }
        while true {
            // The session decides on the HELLO first; what follows it waits, decoded later.
            if case .admitting = state { return actions }
            let next: SecureTransport.Received
            do {
                next = try withDecoder { decoder throws(ConnectionError) in try transport.nextFrame(&decoder) } ?? .needMore
            } catch {
                return actions + fail(error)
            }
            // Reading makes TLS write nothing (KeyUpdate answers go ahead of the next send); a
            // fatal alert goes out with the close that follows a failure.
            switch next {
            case .needMore:
                // Give back, once per batch, the connection window that dropped data used (§7.6).
                if isConnected, let increment = channels.takeReplenishment() {
                    actions += reply(.windowUpdate(channel: 0, increment: increment), over: transport)
                }
                return actions
            case .closed:
                // close_notify is answered with ours (RFC 8446 §6.1).
                return actions + closeTransport(transport, ConnectionError(.connectionClosed))
            case .frame(let frame):
                // Adopted rather than appended when first: appending to an empty array allocates.
                if actions.isEmpty { actions = handle(frame) } else { actions += handle(frame) }
                if isClosed { return actions }
            }
        }
    }

    private mutating func handle(_ frame: Frame) -> [ConnectionAction] {
        if let version = frameTransportSession?.negotiated.version, frame.type.sinceVersion > version {
            return violation("\(frame.type) on a version \(version) connection")
        }
        switch state {
        case .awaitingHello(let session):
            switch frame {
            case .hello(let hello):
                return handleHello(hello, session)
            case .goodbye(let reason):
                // A side may give up before its HELLO (§6.4.6): a refusal, not a violation.
                state = .closed
                return [.close(ConnectionError(.peerSaidGoodbye(reason)))]
            default:
                return violation("\(frame.type) before HELLO")
            }
        case .pairing(var pairing):
            switch frame {
            case .pairingCommit(let commitment) where configuration.role == .listener && pairing.peerCommitment == nil:
                pairing.peerCommitment = commitment
                state = .pairing(pairing)
                return sendFrame(.pairingNonce(pairingNonce), over: pairing.session.transport)
            case .pairingNonce(let nonce) where configuration.role == .dialer:
                // The listener's nonce: reveal ours, and the code is known.
                var actions = sendFrame(.pairingNonce(pairingNonce), over: pairing.session.transport)
                let commitment = PairingCode.commitment(to: pairingNonce.bytes)
                actions += beginTrust(pairing, commitment: commitment, dialerNonce: pairingNonce, listenerNonce: nonce)
                return actions
            case .pairingNonce(let nonce) where configuration.role == .listener && pairing.peerCommitment != nil:
                guard PairingCode.commitment(to: nonce.bytes) == pairing.peerCommitment!.bytes else {
                    return violation("the dialer's pairing nonce does not match its commitment")
                }
                return beginTrust(pairing, commitment: pairing.peerCommitment!.bytes, dialerNonce: nonce, listenerNonce: pairingNonce)
            default:
                return handshakeControl(frame, over: pairing.session.transport, phase: "while pairing")
            }
        case .trusting(var trust):
            switch frame {
            case .trust(.accepted) where !trust.peerAccepted:
                trust.peerAccepted = true
                state = .trusting(trust)
                return establishIfBothAccepted()
            case .trust(let decision) where decision != .accepted:
                state = .closed
                return [.close(ConnectionError(.trustRejectedByPeer(decision)))]
            default:
                return handshakeControl(frame, over: trust.session.transport, phase: "before both sides accepted each other")
            }
        case .resuming(let resuming):
            switch frame {
            case .resume(let resume):
                return resumed(resuming, peerResume: resume)
            default:
                return handshakeControl(frame, over: resuming.session.transport, phase: "before RESUME")
            }
        case .invitation(let session, let peerHello, let received):
            switch frame {
            case .invitation(let invitation) where configuration.role == .listener && !received:
                state = .invitation(session, peerHello: peerHello, received: true)
                return [.invitationReceived(InvitationRequest(
                    peer: peerHello.peerID, invitation: invitation, inviterPreamble: session.negotiated.peerPreamble))]
            case .invitationResponse(let answer) where configuration.role == .dialer:
                var actions: [ConnectionAction] = [.invitationAnswered(answer)]
                actions += closeTransport(session.transport, ConnectionError(.invitationEnded))
                return actions
            default:
                return handshakeControl(frame, over: session.transport, phase: "on an invitation connection")
            }
        case .connected(let session, _):
            switch frame {
            case .hello, .trust, .invitation, .invitationResponse, .pairingCommit, .pairingNonce, .resume:
                return violation("\(frame.type) after the handshake")
            case .ping(let opaque):
                return reply(.pong(opaque), over: session.transport)
            case .goodbye(let reason):
                state = .closed
                return [.close(ConnectionError(.peerSaidGoodbye(reason)))]
            case .message, .meshIntroduction, .pong, .acknowledge:
                return [.deliver(frame)]
            case .streamOpen, .streamData, .streamClose, .streamReset, .windowUpdate, .resourceOffer, .resourceChunk,
                .resourceComplete, .resourceCancel, .resourceAccept, .resourceReceived, .streamResume, .streamAcknowledge:
                return channelFrame(frame)
            }
        case .admitting, .idle, .awaitingPreamble, .tlsHandshake, .closed, .modifying:
            return []  // while admitting, frames are not read (openAndProcess stops)
        }
    }

    /// PING, PONG and GOODBYE before a connection is established; anything else is a violation
    /// of the phase (§7.1).
    private mutating func handshakeControl(_ frame: Frame, over transport: SecureTransport, phase: String) -> [ConnectionAction] {
        switch frame {
        case .ping(let opaque):
            return reply(.pong(opaque), over: transport)
        case .pong:
            return []
        case .goodbye(let reason):
            state = .closed
            return [.close(ConnectionError(.peerSaidGoodbye(reason)))]
        default:
            return violation("\(frame.type) \(phase)")
        }
    }

    private mutating func handleHello(_ hello: Hello, _ session: Session) -> [ConnectionAction] {
        guard hello.version == session.negotiated.version else {
            return violation("HELLO version \(hello.version), negotiated \(session.negotiated.version)")
        }
        guard hello.preambleEcho == session.negotiated.echo else { return fail(ConnectionError(.downgradeDetected)) }
        guard hello.peerID.identifier != configuration.localPeer.identifier else {
            return violation("the peer uses our own peer identifier")
        }
        guard hello.purpose.sinceVersion <= session.negotiated.version else {
            return violation("HELLO purpose \(hello.purpose) on a version \(session.negotiated.version) connection")
        }
        // Plaintext has no keys to resume with (§7.9).
        guard hello.purpose != .resumption || session.transport.engine != nil else {
            return violation("HELLO purpose resumption without TLS")
        }
        switch configuration.role {
        case .dialer:
            guard hello.purpose == .answer else { return violation("a listener's HELLO must have purpose answer") }
            // We reached another peer than the one we meant to (docs/PROTOCOL.md §9.3).
            if let expected = configuration.expectedPeer, hello.peerID.identifier != expected {
                return fail(ConnectionError(.unexpectedPeer))
            }
        case .listener:
            if hello.purpose == .answer { return violation("a dialer's HELLO must not have purpose answer") }
            // Whether this purpose, token and peer may join is the session's decision (SessionCore).
            state = .admitting(session, peerHello: hello)
            return [.admissionRequested(hello)]
        }
        return afterHello(hello, session)
    }

    /// The session's answer to `admissionRequested`: refused, the connection ends; admitted, it
    /// goes on with the frames that waited.
    package mutating func admitted(_ admission: ConnectionConfiguration.Admission) -> [ConnectionAction] {
        guard case .admitting(let session, let hello) = state else { return [] }
        let actions: [ConnectionAction]
        switch admission {
        case .refuse(let reason):
            return fail(ConnectionError(.notAdmitted(reason)))
        case .resume(let grant):
            actions = beginResuming(grant, hello, session)
        case .admit:
            guard hello.purpose != .resumption else { return fail(ConnectionError(.notAdmitted(.unknownToken))) }
            actions = afterHello(hello, session)
        }
        if isClosed { return actions }
        return actions + openAndProcess(ByteBuffer(), transport: session.transport)
    }

    /// Listener: the session found the member this HELLO resumes. The peer must show the same
    /// certificate as before; then our RESUME goes, and the peer's is awaited (§7.9).
    private mutating func beginResuming(
        _ grant: ConnectionConfiguration.ResumptionGrant, _ hello: Hello, _ session: Session
    ) -> [ConnectionAction] {
        guard session.peerChain?.first?.sha256Fingerprint == grant.peerCertificateFingerprint,
            let resume = resumeFrame(grant, session)
        else { return fail(ConnectionError(.notAdmitted(.unknownToken))) }
        state = .resuming(Resuming(session: session, peerHello: hello, grant: grant))
        return sendFrame(resume, over: session.transport)
    }

    /// Our RESUME: the proof for our role, bound to this connection, and what we delivered.
    private func resumeFrame(_ grant: ConnectionConfiguration.ResumptionGrant, _ session: Session) -> Frame? {
        guard let binding = Self.resumptionBinding(session),
            let proof = try? grant.keys.proof(by: configuration.role == .dialer ? .dialer : .listener, binding: binding),
            let resume = try? proof.withUnsafeBytes({ bytes throws(WireError) in try ResumeProof(proof: bytes, delivered: grant.delivered) })
        else { return nil }
        return .resume(resume)
    }

    private static func resumptionBinding(_ session: Session) -> SecureBytes? {
        try? session.transport.engine?.exportKeyingMaterial(
            label: ResumptionKeys.bindingLabel, context: [], length: ResumptionKeys.bindingLength)
    }

    /// The peer's RESUME: its proof must be for its role on this very connection.
    private mutating func resumed(_ resuming: Resuming, peerResume: ResumeProof) -> [ConnectionAction] {
        let peerRole: ResumptionKeys.Role = configuration.role == .dialer ? .listener : .dialer
        guard let binding = Self.resumptionBinding(resuming.session),
            resuming.grant.keys.verify(peerResume.proof, by: peerRole, binding: binding)
        else {
            // A dialer may have reached another host at the peer's old address: not the peer,
            // whose session is not over for that (its next redial may find it).
            return fail(configuration.role == .dialer ? ConnectionError(.unexpectedPeer) : ConnectionError(.notAdmitted(.unknownToken)))
        }
        let session = resuming.session
        guard let connection = established(session, peerHello: resuming.peerHello, resumedPeerDelivered: peerResume.delivered) else {
            return fail(ConnectionError(.tls(SecurityError(.internalError, "the resumption values could not be exported"))))
        }
        channels.acknowledgesStreams = Self.recoversLinks(session)
        state = .connected(session, peerHello: resuming.peerHello)
        return [.established(connection)]
    }

    private mutating func afterHello(_ hello: Hello, _ session: Session) -> [ConnectionAction] {
        if configuration.role == .dialer, configuration.purpose == .resumption, let grant = configuration.resumption {
            // Our RESUME went with our HELLO; the listener's follows its HELLO (§7.9).
            state = .resuming(Resuming(session: session, peerHello: hello, grant: grant))
            return []
        }
        // An invitation connection has no trust step: it carries the invitation and its answer (§7.2).
        let invitationConnection = configuration.role == .dialer ? configuration.purpose == .invitation : hello.purpose == .invitation
        if invitationConnection {
            state = .invitation(session, peerHello: hello, received: false)
            if configuration.role == .dialer {
                return [.awaitingInvitationAnswer(milliseconds: configuration.invitation?.timeoutMilliseconds ?? 0)]
            }
            return []
        }
        // The pairing nonces first; the application is asked once the code is known (§7.3).
        state = .pairing(Pairing(session: session, peerHello: hello))
        return []
    }

    private mutating func beginTrust(_ pairing: Pairing, commitment: [UInt8], dialerNonce: PairingNonce, listenerNonce: PairingNonce) -> [ConnectionAction] {
        let session = pairing.session
        let exporter = (try? session.transport.engine?.exportKeyingMaterial(label: PairingCode.exporterLabel, context: [], length: 32))
            .map { $0.withUnsafeBytes { Array($0) } } ?? []
        let (dialer, listener) = configuration.role == .dialer
            ? (configuration.localPeer.identifier, pairing.peerHello.peerID.identifier)
            : (pairing.peerHello.peerID.identifier, configuration.localPeer.identifier)
        let code = PairingCode.make(
            exporter: exporter, dialer: dialer.bytes, listener: listener.bytes, commitment: commitment,
            dialerNonce: dialerNonce.bytes, listenerNonce: listenerNonce.bytes)
        state = .trusting(Trust(session: session, peerHello: pairing.peerHello))
        return [.evaluateTrust(PeerTrustRequest(
            peer: pairing.peerHello.peerID, certificateChain: session.peerChain, hello: pairing.peerHello, pairingCode: code,
            isEncrypted: session.transport.engine != nil))]
    }

    /// Stream, resource and window frames, checked against the channel table (docs/PROTOCOL.md
    /// §7.6); the legal ones go to the session, which takes or refuses new channels.
    private mutating func channelFrame(_ frame: Frame) -> [ConnectionAction] {
        switch channels.received(frame) {
        case .opened, .forOpenChannel:
            return [.deliver(frame)]
        case .handled:
            // A connection window update (the session's to apply) or a frame for an ended channel.
            if case .windowUpdate(0, _) = frame { return [.deliver(frame)] }
            return []
        case .violation(let error):
            return fail(error)
        }
    }

    private mutating func establishIfBothAccepted() -> [ConnectionAction] {
        guard case .trusting(let trust) = state, trust.localAccepted, trust.peerAccepted else { return [] }
        guard let connection = established(trust.session, peerHello: trust.peerHello, resumedPeerDelivered: nil) else {
            // Without them one side would keep every message and the other acknowledge none.
            return fail(ConnectionError(.tls(SecurityError(.internalError, "the resumption values could not be exported"))))
        }
        channels.acknowledgesStreams = Self.recoversLinks(trust.session)
        state = .connected(trust.session, peerHello: trust.peerHello)
        return [.established(connection)]
    }

    /// Version 2 over TLS: the session can outlive the connection (§7.9), and so can its streams (§7.10).
    private static func recoversLinks(_ session: Session) -> Bool {
        session.negotiated.version >= Hello.Purpose.resumption.sinceVersion && session.transport.isEncrypted
    }

    /// Nil when version 2 over TLS could not export its resumption values.
    private func established(_ session: Session, peerHello: Hello, resumedPeerDelivered: UInt64?) -> EstablishedConnection? {
        let engine = session.transport.engine
        let version = session.negotiated.version
        var keys: ResumptionKeys?
        if version >= Hello.Purpose.resumption.sinceVersion, resumedPeerDelivered == nil, let engine {
            keys = try? ResumptionKeys(export: { (label, length) throws(SecurityError) in
                try engine.exportKeyingMaterial(label: label, context: [], length: length)
            })
            if keys == nil { return nil }
        }
        return EstablishedConnection(
            peer: peerHello.peerID, peerHello: peerHello, certificateChain: session.peerChain,
            isEncrypted: session.transport.isEncrypted, protocolVersion: version, cipherSuite: engine?.negotiatedCipherSuite,
            resumptionKeys: keys, resumedPeerDelivered: resumedPeerDelivered)
    }

    // MARK: Helpers

    /// The transport frames travel on, once they have begun.
    private var frameTransport: SecureTransport? { frameTransportSession?.transport }

    private var frameTransportSession: Session? {
        switch state {
        case .awaitingHello(let session), .admitting(let session, _), .connected(let session, _), .invitation(let session, _, _): session
        case .pairing(let pairing): pairing.session
        case .trusting(let trust): trust.session
        case .resuming(let resuming): resuming.session
        case .idle, .awaitingPreamble, .tlsHandshake, .closed, .modifying: nil
        }
    }

    private mutating func reply(_ frame: Frame, over transport: SecureTransport) -> [ConnectionAction] {
        let queuedBefore = queueHeld(transport)
        let actions = sendFrame(frame, over: transport)
        countReply(actions, queuedBefore: queuedBefore)
        return actions
    }

    /// Seals what TLS holds for coalescing, so it goes out ahead of a reply, and returns the bytes
    /// then queued: the application's, not the reply's. A TLS failure surfaces on the next read.
    private func queueHeld(_ transport: SecureTransport) -> Int {
        (try? transport.sealHeldKeepingQueued()) ?? 0
    }

    /// Counts a reply's own bytes towards the backlog the peer provoked, not what was queued before it.
    private mutating func countReply(_ actions: [ConnectionAction], queuedBefore: Int) {
        var sent = 0
        for case .send(let bytes) in actions { sent += bytes.readableBytes }
        replyByteCount += max(0, sent - queuedBefore)
    }

    private func sendFrame(_ frame: Frame, over transport: SecureTransport) -> [ConnectionAction] {
        // Frames built here are valid by construction; a TLS failure surfaces on the next read.
        guard let sealed = try? transport.seal(frame) else { return [] }
        return sealed.map(ConnectionAction.send)
    }

    private mutating func closeTransport(_ transport: SecureTransport, _ error: ConnectionError) -> [ConnectionAction] {
        var actions: [ConnectionAction] = []
        if case .tls(let engine) = transport {
            engine.close()
            if let bytes = engine.takeOutbound() { actions.append(.send(bytes)) }
        }
        state = .closed
        actions.append(.close(error))
        return actions
    }

    private mutating func violation(_ rule: String) -> [ConnectionAction] {
        fail(ConnectionError(.protocolViolation(WireError(.invalidValue, rule))))
    }

    /// GOODBYE when frames have begun, then close.
    private mutating func fail(_ error: ConnectionError) -> [ConnectionAction] {
        guard let transport = frameTransport else {
            if case .closed = state { return [] }
            state = .closed
            return [.close(error)]
        }
        let actions = sendFrame(.goodbye(error.goodbyeReason), over: transport)
        return actions + closeTransport(transport, error)
    }

    /// Mutates the frame decoder in place; nil before a session has begun or once closed.
    private mutating func withDecoder<Result, Failure: Error>(
        _ body: (inout FrameDecoder) throws(Failure) -> Result
    ) throws(Failure) -> Result? {
        switch state {
        case .awaitingHello, .admitting, .trusting, .pairing, .connected, .invitation, .resuming:
            return try body(&decoder)
        case .idle, .awaitingPreamble, .tlsHandshake, .closed, .modifying:
            return nil
        }
    }
}

extension SecureTransport {
    var engine: TLSEngine? {
        if case .tls(let engine) = self { return engine }
        return nil
    }
}
