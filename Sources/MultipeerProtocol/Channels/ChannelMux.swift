import MultipeerCrypto
import MultipeerWire

/// The channels of one connection as the session sees them (docs/PROTOCOL.md §7.6, §7.8),
/// sans-I/O: which are open each way and of what kind, whose turn it is and the windows the peer
/// gave us (`ChannelScheduler`), the windows we give back (`WindowReturns`), and what each of the
/// peer's channel frames leads to: a stream taken or refused, a resource offer admitted or
/// refused by the limits, a frame for an open channel's endpoint, or window given back for data
/// that crossed our refusal. The connection machine has already judged each frame legal
/// (`ChannelTable`); the shell holds the endpoints, their bytes and files, and sends the frames
/// returned here.
package struct ChannelMux {
    package struct Limits: Sendable, Equatable {
        /// The windows we give the peer, per channel and for the connection.
        package var channelReceiveWindow: UInt32
        package var connectionReceiveWindow: UInt32
        package var maximumIncomingResourceSize: UInt64
        package var maximumIncomingResourcesPerPeer: Int
        /// Across every peer of the session; the shell counts them and says how many there are.
        package var maximumConcurrentIncomingResources: Int

        package init(
            channelReceiveWindow: UInt32, connectionReceiveWindow: UInt32, maximumIncomingResourceSize: UInt64,
            maximumIncomingResourcesPerPeer: Int, maximumConcurrentIncomingResources: Int
        ) {
            self.channelReceiveWindow = channelReceiveWindow
            self.connectionReceiveWindow = connectionReceiveWindow
            self.maximumIncomingResourceSize = maximumIncomingResourceSize
            self.maximumIncomingResourcesPerPeer = maximumIncomingResourcesPerPeer
            self.maximumConcurrentIncomingResources = maximumConcurrentIncomingResources
        }
    }

    package enum Kind: Sendable, Equatable { case stream, resource }

    /// What one of the peer's channel frames leads to.
    package enum Decision: Equatable {
        /// A window grew: serve our channels.
        case serve
        /// Take the peer's stream: make its reader, then send `reply` (our wider window, and the
        /// answer to a STREAM_RESUME). `ordinal`: its number in the session, when the connection
        /// acknowledges streams (§7.10).
        case takeStream(channel: UInt32, name: String, ordinal: UInt32?, reply: [Frame])
        /// The peer continues its stream `ordinal`, which we kept across a lost link (§7.10): its
        /// reader goes on with this channel, after `reply` (how much we have, our wider window).
        case resumeStream(channel: UInt32, ordinal: UInt32, reply: [Frame])
        /// The peer acknowledged bytes of our stream (§7.10); `over` when it acknowledged the end.
        case acknowledged(UInt32, StreamLedger.Acknowledgement)
        /// Within the limits: look for a kept partial and a file to store it in, then answer
        /// with `resourceTaken` or `resourceRefused`.
        case considerResource(channel: UInt32, ResourceOffer)
        /// Refused (STREAM_RESET 3 in `reply`), with the reason for the log.
        case refuse(channel: UInt32, reason: String, reply: [Frame])
        /// For the endpoint of our channel, or of the peer's channel we took; `ended` when the
        /// frame ended the channel here (its endpoint then goes with it).
        case toOutbound(UInt32, ended: Bool)
        /// `reply`: a STREAM_ACK now due (§7.10).
        case toInbound(UInt32, ended: Bool, reply: Frame? = nil)
        /// Data for a channel we refused or ended, sent before the peer knew: its connection
        /// window comes back.
        case giveBack([Frame])
        /// The frame breaks a rule of the session's (§7.10): GOODBYE 1 and close.
        case violation(ConnectionError)
    }

    package let limits: Limits
    private let weAreDialer: Bool
    private var scheduler: ChannelScheduler
    private var returns: WindowReturns
    private var outbound: [UInt32: Kind] = [:]
    private var inbound: [UInt32: Kind] = [:]
    /// The peer's resource offers we are still deciding on (looking for a file).
    private var considering: Set<UInt32> = []
    /// The member's streams across its connections (§7.10); nil on a connection without link
    /// recovery, whose streams end with it.
    package var streams: MemberStreams?
    /// The connection has link recovery (§7.9): only then are there member streams.
    package var recoversLinks: Bool { streams != nil }
    private var outboundOrdinals: [UInt32: UInt32] = [:]
    private var inboundOrdinals: [UInt32: UInt32] = [:]
    /// Our resumed streams whose answer has not come: served only once it has.
    private var awaitingAnswer: Set<UInt32> = []

    package init(weAreDialer: Bool, limits: Limits, streams: MemberStreams? = nil) {
        self.weAreDialer = weAreDialer
        self.limits = limits
        self.streams = streams
        scheduler = ChannelScheduler(weAreDialer: weAreDialer)
        returns = WindowReturns(channelWindow: limits.channelReceiveWindow, connectionWindow: limits.connectionReceiveWindow)
    }

    /// Whether we opened `channel` (the dialer opens odd numbers).
    package func isOurs(_ channel: UInt32) -> Bool { (channel % 2 == 1) == weAreDialer }

    /// Whether the channel is open here, ours or the peer's.
    package func isOpen(_ channel: UInt32) -> Bool {
        isOurs(channel) ? outbound[channel] != nil : inbound[channel] != nil
    }

    package var outboundCount: Int { outbound.count }
    /// The peer's resources we are receiving, or deciding on.
    package var incomingResources: Int { inbound.values.count { $0 == .resource } + considering.count }

    /// The first frame a new member's connection gets: our connection window, raised from the
    /// protocol's initial one. Nil when ours is the initial one.
    package var connectionWindowWidening: Frame? {
        let extra = limits.connectionReceiveWindow &- WireLimits.initialConnectionWindow
        guard limits.connectionReceiveWindow > WireLimits.initialConnectionWindow else { return nil }
        return .windowUpdate(channel: 0, increment: extra)
    }

    // MARK: Our channels

    /// A number for a new channel of ours; nil when 64 of ours are open (§7.6).
    package mutating func open(_ kind: Kind) -> UInt32? {
        guard let channel = scheduler.open() else { return nil }
        outbound[channel] = kind
        return channel
    }

    /// A new stream of ours: its channel, and its ordinal in the session when the connection
    /// acknowledges streams (§7.10). Nil when 64 of ours are open.
    package mutating func openStream() -> (channel: UInt32, ordinal: UInt32?)? {
        guard let channel = open(.stream) else { return nil }
        guard let streams else { return (channel, nil) }
        guard let ordinal = streams.ledger.opened() else {
            endOutbound(channel)
            return nil
        }
        outboundOrdinals[channel] = ordinal
        return (channel, ordinal)
    }

    /// Continues our stream `ordinal` on a new channel of this connection (§7.10): the frames to
    /// send (STREAM_RESUME, and STREAM_RESET 1 after it for a stream we reset). The channel is
    /// served once the peer answers. Nil when 64 of ours are open or the stream is not kept.
    package mutating func resumeStream(_ ordinal: UInt32, name: String) -> (channel: UInt32, frames: [Frame])? {
        guard let streams, streams.ledger.keeps(ordinal), let channel = open(.stream) else { return nil }
        outboundOrdinals[channel] = ordinal
        awaitingAnswer.insert(channel)
        var frames: [Frame] = [.streamResume(channel: channel, ordinal: ordinal, name: name)]
        if streams.ledger.end(of: ordinal) == .reset { frames.append(.streamReset(channel: channel, code: .cancelled)) }
        return (channel, frames)
    }

    /// Our channel ended (closed, reset, cancelled, its resource answered), or was opened and
    /// then not used. False when it was not open.
    @discardableResult
    package mutating func endOutbound(_ channel: UInt32) -> Bool {
        guard outbound.removeValue(forKey: channel) != nil else { return false }
        scheduler.ended(channel)
        outboundOrdinals[channel] = nil
        awaitingAnswer.remove(channel)
        return true
    }

    /// The peer's channel ended here. False when it was not open.
    @discardableResult
    package mutating func endInbound(_ channel: UInt32) -> Bool {
        guard inbound.removeValue(forKey: channel) != nil else { return false }
        returns.forget(channel)
        if let ordinal = inboundOrdinals.removeValue(forKey: channel) { streams?.ledger.peerStreamEnded(ordinal) }
        return true
    }

    /// What an endpoint's own frame for its channel (a reset, a cancel, an answer) does: nil
    /// when it may not go, because the channel has ended here (a late cancel after the peer's
    /// own end sends nothing); otherwise whether it ends the channel, which it then does.
    package mutating func weSend(_ frame: Frame) -> Bool? {
        let channel = frame.channel
        if isOurs(channel) {
            guard let kind = outbound[channel] else { return nil }
            if let ordinal = outboundOrdinals[channel], let streams {
                // With link recovery our stream lasts until the peer acknowledges its end (§7.10).
                switch frame {
                case .streamClose: streams.ledger.ended(ordinal, .closed)
                case .streamReset: streams.ledger.ended(ordinal, .reset)
                default: break
                }
                return false
            }
            let ends = Self.ends(frame, of: kind, sentByOpener: true)
            if ends { endOutbound(channel) }
            return ends
        }
        guard let kind = inbound[channel] else { return nil }
        let ends = Self.ends(frame, of: kind, sentByOpener: false)
        if ends { endInbound(channel) }
        return ends
    }

    /// §7.6, §7.8: the frames after which a channel is over for whoever sent or received them.
    /// The opener ends its stream with STREAM_CLOSE; either side ends any channel with
    /// STREAM_RESET or RESOURCE_CANCEL; the receiver of a resource ends it with its answer.
    /// RESOURCE_COMPLETE does not: the sender waits for that answer.
    package static func ends(_ frame: Frame, of kind: Kind, sentByOpener: Bool) -> Bool {
        switch frame {
        case .streamReset: return true
        case .streamClose: return kind == .stream && sentByOpener
        case .resourceCancel: return kind == .resource
        case .resourceReceived: return kind == .resource && !sentByOpener
        default: return false
        }
    }

    package mutating func markReady(_ channel: UInt32) {
        guard !awaitingAnswer.contains(channel) else { return }
        scheduler.markReady(channel)
    }

    /// The next of our channels to serve and its allowance (§7.6: one frame each in turn; a
    /// stream also within what may go unacknowledged, §7.10).
    package mutating func next() -> (channel: UInt32, allowance: Int)? {
        guard let (channel, allowance) = scheduler.next() else { return nil }
        guard let streams, let ordinal = outboundOrdinals[channel] else { return (channel, allowance) }
        return (channel, min(allowance, streams.ledger.allowance(ordinal)))
    }

    package mutating func served(_ channel: UInt32, _ served: ChannelScheduler.Served) {
        if case .data(let bytes) = served, let ordinal = outboundOrdinals[channel] { streams?.ledger.sent(bytes, on: ordinal) }
        scheduler.served(channel, served)
    }

    /// The session ordinal of our stream on `channel`, when the connection acknowledges streams.
    package func ordinal(ofOutbound channel: UInt32) -> UInt32? { outboundOrdinals[channel] }

    // MARK: The peer's frames

    /// A member's incoming resources that a lost link cut off and that wait for their sender's
    /// offer on a resumed link (docs/PROTOCOL.md §7.9): they keep their places, and the offer
    /// that resumes one takes its place over rather than needing another.
    package struct InterruptedResources: Sendable {
        /// How many from this peer wait (counted in `incomingResourcesInSession` too).
        package var waitingFromPeer: Int
        /// Whether this offer resumes one of them.
        package var resumesOne: Bool
        /// An offer the receiver answers from what it remembers of the send (§7.9): a RESUMED
        /// one with its verdict, any with the app's cancel of it. No file, no bytes, so none of
        /// the limits apply (refused by a limit, the sender would fail a delivered file).
        package var answeredFromMemory: Bool

        package init(waitingFromPeer: Int, resumesOne: Bool, answeredFromMemory: Bool = false) {
            self.waitingFromPeer = waitingFromPeer
            self.resumesOne = resumesOne
            self.answeredFromMemory = answeredFromMemory
        }

        package static let none = InterruptedResources(waitingFromPeer: 0, resumesOne: false)
    }

    /// One of the peer's channel frames, already judged legal by the connection. `accepting`:
    /// whether anyone takes streams and resources now; `incomingResourcesInSession`: the
    /// session's incoming resources across every peer; `interrupted`: the peer's resources that
    /// wait for a resumed link. They are asked only for an opening frame: they cost the shell
    /// locks, and data and window frames come by the thousand.
    package mutating func peerSent(
        _ frame: Frame, accepting: @autoclosure () -> Bool, incomingResourcesInSession: @autoclosure () -> Int,
        interrupted: (ResourceOffer) -> InterruptedResources = { _ in .none }
    ) -> Decision {
        let channel = frame.channel
        switch frame {
        case .windowUpdate(0, let increment):
            scheduler.connectionWindowUpdate(increment: increment)
            return .serve
        case .windowUpdate(_, let increment):
            scheduler.windowUpdate(channel, increment: increment)
            return .serve
        case .streamOpen(_, let name):
            var ordinal: UInt32?
            if let streams {
                ordinal = streams.ledger.peerOpened()
                guard ordinal != nil else { return violation("the peer opened more than 2^32 streams in the session") }
            }
            return take(channel, name: name, ordinal: ordinal, accepting: accepting(), answer: [])
        case .streamResume(_, let ordinal, let name):
            guard let streams else { return .giveBack([]) }  // the connection refuses it without link recovery
            let resumption: StreamLedger.PeerResumption
            do {
                resumption = try streams.ledger.peerResumes(ordinal)
            } catch {
                return violation("\(error)")
            }
            switch resumption {
            case .new:
                return take(
                    channel, name: name, ordinal: ordinal, accepting: accepting(),
                    answer: [.streamAcknowledge(channel: channel, received: 0, closed: false)])
            case .kept(let received):
                guard !inboundOrdinals.values.contains(ordinal) else {
                    return violation("STREAM_RESUME of stream \(ordinal), which an open channel of this connection carries")
                }
                inbound[channel] = .stream
                inboundOrdinals[channel] = ordinal
                return .resumeStream(
                    channel: channel, ordinal: ordinal,
                    reply: [.streamAcknowledge(channel: channel, received: received, closed: false)] + channelWidening(channel))
            case .ended:
                return .refuse(channel: channel, reason: "stream \(ordinal) ended here", reply: [.streamReset(channel: channel, code: .cancelled)])
            }
        case .streamAcknowledge(_, let received, let closed):
            guard let streams, let ordinal = outboundOrdinals[channel] else { return .giveBack([]) }
            let answering = awaitingAnswer.remove(channel) != nil
            let acknowledgement: StreamLedger.Acknowledgement
            do {
                acknowledgement = try streams.ledger.acknowledged(ordinal, received: received, closed: closed, answering: answering)
            } catch {
                return violation("\(error)")
            }
            if acknowledgement.over {
                endOutbound(channel)
            } else if answering {
                scheduler.markReady(channel)
            } else if acknowledgement.released > 0 {
                scheduler.unblock(channel)
            }
            return .acknowledged(channel, acknowledgement)
        case .resourceOffer(_, let offer):
            guard accepting() else { return refuse(channel, "nobody takes resources (no delegate, no event stream)") }
            guard offer.size <= limits.maximumIncomingResourceSize else { return refuse(channel, "\(offer.size) bytes, over the limit") }
            let waiting = interrupted(offer)
            if waiting.answeredFromMemory {
                considering.insert(channel)
                return .considerResource(channel: channel, offer)
            }
            let handedOver = waiting.resumesOne ? 1 : 0
            guard incomingResources + waiting.waitingFromPeer - handedOver < limits.maximumIncomingResourcesPerPeer else {
                return refuse(channel, "too many incoming resources from this peer at once")
            }
            guard incomingResourcesInSession() - handedOver < limits.maximumConcurrentIncomingResources else {
                return refuse(channel, "too many incoming resources at once")
            }
            considering.insert(channel)
            return .considerResource(channel: channel, offer)
        default:
            if isOurs(channel) {
                guard let kind = outbound[channel] else { return .giveBack([]) }
                let ends = Self.ends(frame, of: kind, sentByOpener: false)
                if ends {
                    // The peer reset our stream (or answered its resume so): nothing to keep.
                    if let ordinal = outboundOrdinals[channel] { streams?.ledger.forget(ordinal) }
                    endOutbound(channel)
                }
                return .toOutbound(channel, ended: ends)
            }
            if let kind = inbound[channel] {
                let ends = Self.ends(frame, of: kind, sentByOpener: true)
                var acknowledgement: Frame?
                if let streams, let ordinal = inboundOrdinals[channel] {
                    switch frame {
                    case .streamData(_, let data):
                        if let count = streams.ledger.received(data.readableBytes, on: ordinal) {
                            acknowledgement = .streamAcknowledge(channel: channel, received: count, closed: false)
                        }
                    case .streamClose, .streamReset:
                        if let count = streams.ledger.peerStreamEnded(ordinal) {
                            acknowledgement = .streamAcknowledge(channel: channel, received: count, closed: true)
                        }
                    default:
                        break
                    }
                }
                if ends { endInbound(channel) }
                return .toInbound(channel, ended: ends, reply: acknowledgement)
            }
            switch frame {
            case .streamData(_, let data), .resourceChunk(_, let data): return .giveBack(taken([channel: data.readableBytes]))
            default: return .giveBack([])
            }
        }
    }

    /// A resource we were considering is taken, from `offset` (a kept partial's length, or 0):
    /// RESOURCE_ACCEPT, then our wider window.
    package mutating func resourceTaken(_ channel: UInt32, offset: UInt64) -> [Frame] {
        guard considering.remove(channel) != nil else { return [] }
        inbound[channel] = .resource
        return [.resourceAccept(channel: channel, offset: offset)] + channelWidening(channel)
    }

    /// A resource we were considering cannot be stored: refused.
    package mutating func resourceRefused(_ channel: UInt32) -> [Frame] {
        guard considering.remove(channel) != nil else { return [] }
        return [.streamReset(channel: channel, code: .refused)]
    }

    /// The application took (or dropped) bytes of the peer's channels: the window updates due.
    package mutating func taken(_ bytes: [UInt32: Int]) -> [Frame] {
        var frames: [Frame] = []
        for (channel, count) in bytes {
            frames += returns.taken(count, on: channel, channelOpen: inbound[channel] != nil)
        }
        return frames
    }

    /// docs/PROTOCOL.md §7.8: the first 16 bytes of SHA-256 over a label, the receiver, the
    /// source's identity, its size and its modification time, as the caller spells them.
    package static func transferID(receiver: Bytes16, sourceIdentity: String, size: UInt64, modified: Int64) -> Bytes16 {
        var input = Array("mpcp-resource-id".utf8) + receiver.bytes + Array(sourceIdentity.utf8)
        input += withUnsafeBytes(of: size.bigEndian, Array.init)
        input += withUnsafeBytes(of: modified.bigEndian, Array.init)
        return Bytes16(bytes: SHA256Hasher.digest(input).prefix(16))!
    }

    private func channelWidening(_ channel: UInt32) -> [Frame] {
        guard limits.channelReceiveWindow > WireLimits.initialChannelWindow else { return [] }
        return [.windowUpdate(channel: channel, increment: limits.channelReceiveWindow - WireLimits.initialChannelWindow)]
    }

    /// The peer's stream, opened by STREAM_OPEN or by a STREAM_RESUME of one we never saw.
    private mutating func take(_ channel: UInt32, name: String, ordinal: UInt32?, accepting: Bool, answer: [Frame]) -> Decision {
        // Nobody would read it: refused at once rather than left to hold the window.
        guard accepting else {
            if let ordinal { streams?.ledger.peerStreamEnded(ordinal) }
            return refuse(channel, "nobody takes streams (no delegate, no event stream)")
        }
        inbound[channel] = .stream
        if let ordinal { inboundOrdinals[channel] = ordinal }
        return .takeStream(channel: channel, name: name, ordinal: ordinal, reply: answer + channelWidening(channel))
    }

    private func violation(_ rule: String) -> Decision {
        .violation(ConnectionError(.protocolViolation(WireError(.invalidValue, rule))))
    }

    private func refuse(_ channel: UInt32, _ reason: String) -> Decision {
        .refuse(channel: channel, reason: reason, reply: [.streamReset(channel: channel, code: .refused)])
    }
}
