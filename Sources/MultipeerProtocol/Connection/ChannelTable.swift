import MultipeerWire

/// One connection's stream and resource channels as the rules of docs/PROTOCOL.md §6.2, §7.6 and
/// §7.8 see them: which numbers each side opened, which are open, what kind they are, which we
/// reset, and what the peer may still send (windows, resource bytes). It judges every channel
/// frame the peer sends and learns from every one we send; what to do with a channel (take it,
/// read it, schedule our data) is the session's.
///
/// Memory stays bounded whatever the peer sends: the highest number the peer opened, the
/// channels open (at most 64 a side), and the 64 channels we ended most recently that the peer
/// may still name. That still tells every frame of a compliant peer from a violation: a frame for
/// a channel we reset was sent before the peer read that reset, hence before it read any later
/// one, so when we made the 64th later reset the peer had all of those channels open: 65, over
/// its limit. Only a peer that broke the limit, or kept sending after reading a reset, names a
/// channel that dropped out (docs/PROTOCOL.md §7.6).
package struct ChannelTable {
    package enum Kind: Equatable, Sendable {
        case stream
        case resource(size: UInt64)
    }

    package enum Disposition: Equatable {
        /// The peer opened this channel: the session takes it, or refuses it with STREAM_RESET 3.
        case opened(UInt32)
        /// A legal frame on an open channel (either side's), for the session.
        case forOpenChannel(UInt32)
        /// Nothing more to do: a window update applied, or a frame for an ended channel dropped.
        case handled
        /// GOODBYE with the error's reason, then close.
        case violation(ConnectionError)
    }

    /// A channel the peer opened and we still read.
    private struct PeerChannel {
        let kind: Kind
        /// What the peer may still send on it before we give some back.
        var receiveWindow = WireLimits.initialChannelWindow
        /// Resource bytes still to come once we accepted (size − offset); nil before RESOURCE_ACCEPT.
        var remaining: UInt64?
        var completed = false
        /// Opened by STREAM_RESUME and not yet answered: no data or close may come (§7.10).
        var awaitingAnswer = false
    }

    /// A channel we opened and still write (or, for a resource, await the verdict on).
    private struct LocalChannel {
        let kind: Kind
        /// What we may still send on it; the peer's WINDOW_UPDATEs raise it.
        var sendWindow = WireLimits.initialChannelWindow
        /// Resource bytes still to send once the peer accepted (size − offset); nil before.
        var remaining: UInt64?
        var completed = false
        /// Opened by STREAM_RESUME, whose answer has not come: we send nothing more yet (§7.10).
        var awaitingAnswer = false
        /// A stream we closed or reset that waits for the receiver's STREAM_ACK with CLOSED (§7.10).
        var ending = false
    }

    /// A channel we ended that the peer may still name. Data the peer sent before it read our
    /// reset still arrives and counts against the window the channel had; we never raise it again.
    private struct EndedChannel {
        let channel: UInt32
        var window: UInt32
        /// The opener sent RESOURCE_COMPLETE: only its RESOURCE_CANCEL, crossing our end, may follow.
        var completed = false
    }

    /// As many ended channels as the peer may have channels open (see the type's comment).
    static let rememberedResets = WireLimits.maxChannelsOpenedPerSide

    /// 1 when the peer is the dialer (odd channels), 0 when it is the listener (even ones).
    private let peerParity: UInt32
    /// The largest channel number the peer has opened; 0 before its first.
    private(set) var highestPeerChannel: UInt32 = 0
    private var peerOpen: [UInt32: PeerChannel] = [:]
    /// Oldest first; at most `rememberedResets`.
    private var ended: [EndedChannel] = []
    /// The largest channel number we have opened; 0 before our first.
    private(set) var highestLocalChannel: UInt32 = 0
    private var localOpen: [UInt32: LocalChannel] = [:]
    /// What we may still send on the connection; the peer's WINDOW_UPDATEs on channel 0 raise it.
    private(set) var connectionSendWindow = WireLimits.initialConnectionWindow
    /// What the peer may still send on the connection before we give some back.
    private(set) var connectionReceiveWindow = WireLimits.initialConnectionWindow
    /// Bytes of discarded data not yet given back to the peer's connection window.
    private var unreplenished: UInt32 = 0

    /// Version 2 over TLS (docs/PROTOCOL.md §7.10): STREAM_RESUME and STREAM_ACK belong here,
    /// and our streams stay open after their end until the receiver acknowledges it.
    var acknowledgesStreams = false

    init(weAreDialer: Bool) {
        peerParity = weAreDialer ? 0 : 1
    }

    /// How many ended channels the table remembers; never above `rememberedResets`.
    var rememberedResetCount: Int { ended.count }
    var peerOpenCount: Int { peerOpen.count }
    var localOpenCount: Int { localOpen.count }
    func isPeerChannelOpen(_ channel: UInt32) -> Bool { peerOpen[channel] != nil }
    func isLocalChannelOpen(_ channel: UInt32) -> Bool { localOpen[channel] != nil }

    // MARK: Frames the peer sends

    mutating func received(_ frame: Frame) -> Disposition {
        let channel = frame.channel
        switch frame {
        case .streamOpen:
            return peerOpens(channel, .stream)
        case .streamResume:
            guard acknowledgesStreams else { return violation(.invalidValue, "STREAM_RESUME on a connection without link recovery") }
            let opened = peerOpens(channel, .stream)
            if case .opened = opened { peerOpen[channel]?.awaitingAnswer = true }
            return opened
        case .streamAcknowledge where !acknowledgesStreams:
            return violation(.invalidValue, "STREAM_ACK on a connection without link recovery")
        case .resourceOffer(_, let offer):
            guard !offer.resumed || acknowledgesStreams else {
                return violation(.invalidValue, "RESOURCE_OFFER with RESUMED on a connection without link recovery")
            }
            // With link recovery every offer names its send (§6.4.14), and only then.
            guard (offer.sendID != nil) == acknowledgesStreams else {
                return violation(
                    .invalidValue, acknowledgesStreams ? "RESOURCE_OFFER without SEND_ID on a connection with link recovery"
                        : "RESOURCE_OFFER with SEND_ID on a connection without link recovery")
            }
            return peerOpens(channel, .resource(size: offer.size))
        case .windowUpdate(0, let increment):
            guard UInt64(connectionSendWindow) + UInt64(increment) <= UInt64(WireLimits.maxWindow) else {
                return .violation(ConnectionError(.flowControlViolation("WINDOW_UPDATE of \(increment) takes the connection window past \(WireLimits.maxWindow)")))
            }
            connectionSendWindow += increment
            return .handled
        case .hello, .trust, .invitation, .invitationResponse, .meshIntroduction, .goodbye, .ping, .pong, .message:
            // Connection-level frames belong to the state machine, which never passes them here.
            return .handled
        default:
            break
        }
        if channel % 2 == peerParity {
            return onPeerChannel(frame)
        }
        return onLocalChannel(frame)
    }

    /// A frame on a channel the peer opened: only the opener's frames, and STREAM_RESET and
    /// RESOURCE_CANCEL, are allowed.
    private mutating func onPeerChannel(_ frame: Frame) -> Disposition {
        let channel = frame.channel
        if let index = ended.firstIndex(where: { $0.channel == channel }) {
            return onEndedPeerChannel(frame, at: index)
        }
        guard var open = peerOpen[channel] else {
            let why = channel > highestPeerChannel ? "the peer never opened channel \(channel)" : "channel \(channel) is neither open nor recently ended"
            return violation(.invalidChannel, "\(frame.type): \(why)")
        }
        if open.awaitingAnswer, frame.type == .streamData || frame.type == .streamClose {
            return violation(.invalidValue, "\(frame.type) on channel \(channel) before we answered its STREAM_RESUME")
        }
        switch (frame, open.kind) {
        case (.streamData(_, let data), .stream):
            guard charge(&open, UInt32(data.readableBytes)) else { return flowViolation(frame, channel) }
            peerOpen[channel] = open
            return .forOpenChannel(channel)
        case (.streamClose, .stream):
            peerOpen[channel] = nil
            return .forOpenChannel(channel)
        case (.resourceChunk(_, let data), .resource):
            guard let remaining = open.remaining, !open.completed else {
                return violation(.invalidValue, "RESOURCE_CHUNK on channel \(channel) \(open.completed ? "after RESOURCE_COMPLETE" : "before RESOURCE_ACCEPT")")
            }
            guard UInt64(data.readableBytes) <= remaining else {
                return violation(.invalidValue, "RESOURCE_CHUNK on channel \(channel) beyond the accepted size")
            }
            guard charge(&open, UInt32(data.readableBytes)) else { return flowViolation(frame, channel) }
            open.remaining = remaining - UInt64(data.readableBytes)
            peerOpen[channel] = open
            return .forOpenChannel(channel)
        case (.resourceComplete, .resource):
            guard open.remaining != nil, !open.completed else {
                return violation(.invalidValue, "RESOURCE_COMPLETE on channel \(channel) \(open.completed ? "twice" : "before RESOURCE_ACCEPT")")
            }
            open.completed = true
            peerOpen[channel] = open
            return .forOpenChannel(channel)
        case (.streamReset, .resource) where open.completed:
            return violation(.invalidValue, "STREAM_RESET on channel \(channel) after RESOURCE_COMPLETE (only RESOURCE_CANCEL may follow)")
        case (.streamReset, _), (.resourceCancel, .resource):
            peerOpen[channel] = nil
            return .forOpenChannel(channel)
        case (.windowUpdate, _), (.resourceAccept, _), (.resourceReceived, _), (.streamAcknowledge, _):
            return violation(.invalidValue, "\(frame.type) from the opener of channel \(channel)")
        default:
            return violation(.invalidValue, "\(frame.type) on \(open.kind == .stream ? "stream" : "resource") channel \(channel)")
        }
    }

    /// Takes `bytes` from the channel's and the connection's receive windows; false when either is exceeded.
    private mutating func charge(_ open: inout PeerChannel, _ bytes: UInt32) -> Bool {
        guard bytes <= open.receiveWindow, bytes <= connectionReceiveWindow else { return false }
        open.receiveWindow -= bytes
        connectionReceiveWindow -= bytes
        return true
    }

    private mutating func onEndedPeerChannel(_ frame: Frame, at index: Int) -> Disposition {
        if ended[index].completed {
            // After its RESOURCE_COMPLETE the opener sends nothing but RESOURCE_CANCEL (§7.6).
            guard case .resourceCancel = frame else {
                return violation(.invalidValue, "\(frame.type) on channel \(frame.channel) after RESOURCE_COMPLETE")
            }
            ended.remove(at: index)
            return .handled
        }
        // Dropped, but in-flight data still counts against both windows (§7.6).
        var dataBytes: UInt32 = 0
        var finishes = false
        switch frame {
        case .streamData(_, let data), .resourceChunk(_, let data): dataBytes = UInt32(data.readableBytes)
        case .streamClose, .streamReset, .resourceCancel: finishes = true
        case .resourceComplete:
            // The opener may still cancel after completing (§6.4.16): remember it, with no window.
            ended[index].window = 0
            ended[index].completed = true
            return .handled
        case .windowUpdate, .resourceAccept, .resourceReceived, .streamAcknowledge:
            return violation(.invalidValue, "\(frame.type) from the opener of channel \(frame.channel)")
        default: break
        }
        guard dataBytes <= ended[index].window else {
            return .violation(ConnectionError(.flowControlViolation("\(frame.type) beyond the window of ended channel \(frame.channel)")))
        }
        guard dataBytes <= connectionReceiveWindow else {
            return .violation(ConnectionError(.flowControlViolation("\(frame.type) beyond the connection window")))
        }
        ended[index].window -= dataBytes
        connectionReceiveWindow -= dataBytes
        unreplenished += dataBytes
        // Finished by the peer as well: nothing more may come for it.
        if finishes { ended.remove(at: index) }
        return .handled
    }

    /// A frame on a channel we opened: only the receiver's frames, and STREAM_RESET and
    /// RESOURCE_CANCEL, are allowed.
    private mutating func onLocalChannel(_ frame: Frame) -> Disposition {
        let channel = frame.channel
        guard channel <= highestLocalChannel else {
            return violation(.invalidChannel, "\(frame.type): we opened no channel \(channel)")
        }
        switch frame.type {
        case .streamOpen, .streamResume, .resourceOffer, .streamData, .streamClose, .resourceChunk, .resourceComplete:
            return violation(.invalidValue, "\(frame.type) from the receiver of channel \(channel)")
        default:
            break
        }
        // Ended on our side: the peer's frame crossed our close, reset or cancel.
        guard var open = localOpen[channel] else { return .handled }
        switch (frame, open.kind) {
        case (.windowUpdate, _) where open.awaitingAnswer:
            return violation(.invalidValue, "WINDOW_UPDATE on channel \(channel) before the answer to its STREAM_RESUME")
        case (.windowUpdate(_, let increment), _):
            guard UInt64(open.sendWindow) + UInt64(increment) <= UInt64(WireLimits.maxWindow) else {
                return .violation(ConnectionError(.flowControlViolation("WINDOW_UPDATE of \(increment) takes channel \(channel)'s window past \(WireLimits.maxWindow)")))
            }
            open.sendWindow += increment
            localOpen[channel] = open
            return .forOpenChannel(channel)
        case (.resourceAccept(_, let offset), .resource(let size)):
            guard open.remaining == nil, offset <= size else {
                return violation(.invalidValue, open.remaining != nil ? "a second RESOURCE_ACCEPT on channel \(channel)" : "RESOURCE_ACCEPT offset \(offset) above the size \(size)")
            }
            open.remaining = size - offset
            localOpen[channel] = open
            return .forOpenChannel(channel)
        case (.resourceReceived, .resource):
            guard open.completed else { return violation(.invalidValue, "RESOURCE_RECEIVED on channel \(channel) before RESOURCE_COMPLETE") }
            localOpen[channel] = nil
            return .forOpenChannel(channel)
        case (.streamAcknowledge(_, _, let closed), .stream):
            // The counts are the session's to judge (`StreamLedger`); the table knows only the end.
            if closed {
                guard open.ending else { return violation(.invalidValue, "STREAM_ACK with CLOSED on channel \(channel) before we ended it") }
                localOpen[channel] = nil
            } else {
                open.awaitingAnswer = false
                localOpen[channel] = open
            }
            return .forOpenChannel(channel)
        case (.streamReset, _), (.resourceCancel, .resource):
            localOpen[channel] = nil
            return .forOpenChannel(channel)
        default:
            return violation(.invalidValue, "\(frame.type) on \(open.kind == .stream ? "stream" : "resource") channel \(channel)")
        }
    }

    // MARK: Frames we send

    /// Learns from a channel frame we are about to send; throws for one that breaks a rule
    /// (a bug in the session, never the peer's doing), and then it must not be sent.
    mutating func sending(_ frame: Frame) throws(SendRefusal) {
        let channel = frame.channel
        switch frame {
        case .streamOpen, .resourceOffer, .streamResume:
            if case .streamResume = frame, !acknowledgesStreams { throw .channelRule("STREAM_RESUME without link recovery") }
            if case .resourceOffer(_, let offer) = frame, offer.resumed, !acknowledgesStreams {
                throw .channelRule("RESOURCE_OFFER with RESUMED without link recovery")
            }
            if case .resourceOffer(_, let offer) = frame, (offer.sendID != nil) != acknowledgesStreams {
                throw .channelRule("RESOURCE_OFFER SEND_ID \(offer.sendID != nil ? "without" : "missing with") link recovery")
            }
            guard channel % 2 != peerParity, channel > highestLocalChannel else { throw .channelRule("opening channel \(channel) after \(highestLocalChannel)") }
            guard localOpen.count < WireLimits.maxChannelsOpenedPerSide else { throw .channelRule("a 65th channel") }
            highestLocalChannel = channel
            switch frame {
            case .resourceOffer(_, let offer): localOpen[channel] = LocalChannel(kind: .resource(size: offer.size))
            case .streamResume: localOpen[channel] = LocalChannel(kind: .stream, awaitingAnswer: true)
            default: localOpen[channel] = LocalChannel(kind: .stream)
            }
        case .streamData(_, let data), .resourceChunk(_, let data):
            guard var open = localOpen[channel] else { throw notOpen(frame) }
            guard !open.awaitingAnswer, !open.ending else { throw .channelRule("\(frame.type) on channel \(channel) before its STREAM_RESUME's answer or after its end") }
            let bytes = UInt32(data.readableBytes)
            guard bytes <= open.sendWindow, bytes <= connectionSendWindow else {
                throw .channelRule("\(frame.type) of \(bytes) bytes beyond the window of channel \(channel) or of the connection")
            }
            if case .resourceChunk = frame {
                guard let remaining = open.remaining, !open.completed, UInt64(bytes) <= remaining else {
                    throw .channelRule("RESOURCE_CHUNK on channel \(channel) before RESOURCE_ACCEPT, after RESOURCE_COMPLETE or beyond the size")
                }
                open.remaining = remaining - UInt64(bytes)
            } else {
                guard open.kind == .stream else { throw .channelRule("STREAM_DATA on resource channel \(channel)") }
            }
            open.sendWindow -= bytes
            connectionSendWindow -= bytes
            localOpen[channel] = open
        case .streamClose:
            guard let open = localOpen[channel] else { throw notOpen(frame) }
            guard open.kind == .stream else { throw .channelRule("STREAM_CLOSE on resource channel \(channel)") }
            guard !open.awaitingAnswer, !open.ending else { throw .channelRule("STREAM_CLOSE on channel \(channel) before its STREAM_RESUME's answer or after its end") }
            // With link recovery the stream stays ours until the receiver acknowledges its end.
            if acknowledgesStreams { localOpen[channel]?.ending = true } else { localOpen[channel] = nil }
        case .resourceComplete:
            guard let open = localOpen[channel] else { throw notOpen(frame) }
            guard open.remaining != nil, !open.completed else {
                throw .channelRule("RESOURCE_COMPLETE on channel \(channel), which is not an accepted, unfinished resource")
            }
            localOpen[channel]?.completed = true
        case .windowUpdate(0, let increment):
            try grantConnection(increment)
        case .windowUpdate(_, let increment):
            // Only a reader gives window back, and only on a number the peer opened: the peer
            // closes on any other (docs/PROTOCOL.md §7.6).
            guard channel % 2 == peerParity, channel <= highestPeerChannel else {
                throw .channelRule("WINDOW_UPDATE on channel \(channel), which the peer never opened")
            }
            guard var open = peerOpen[channel] else { return }  // ended meanwhile: harmless, and the peer drops it
            guard UInt64(open.receiveWindow) + UInt64(increment) <= UInt64(WireLimits.maxWindow) else {
                throw .channelRule("channel \(channel) window above the largest")
            }
            open.receiveWindow += increment
            peerOpen[channel] = open
        case .streamAcknowledge:
            guard acknowledgesStreams else { throw .channelRule("STREAM_ACK without link recovery") }
            guard channel % 2 == peerParity, channel <= highestPeerChannel else {
                throw .channelRule("STREAM_ACK on channel \(channel), which the peer never opened")
            }
            guard var open = peerOpen[channel] else { return }  // its end, acknowledged
            guard open.kind == .stream else { throw .channelRule("STREAM_ACK on resource channel \(channel)") }
            open.awaitingAnswer = false
            peerOpen[channel] = open
        case .resourceAccept(_, let offset):
            guard var open = peerOpen[channel], case .resource(let size) = open.kind, open.remaining == nil, offset <= size else {
                throw .channelRule("RESOURCE_ACCEPT on channel \(channel)")
            }
            open.remaining = size - offset
            peerOpen[channel] = open
        case .resourceReceived:
            guard peerOpen[channel]?.completed == true else { throw .channelRule("RESOURCE_RECEIVED on channel \(channel)") }
            endPeerChannel(channel, window: 0, completed: true)
        case .streamReset, .resourceCancel:
            if channel % 2 == peerParity {
                // The opener drops either once it has ended the channel, so an ended one may still
                // be named (a frame crossing the opener's end); a number never opened may not.
                guard channel != 0, channel <= highestPeerChannel else {
                    throw .channelRule("\(frame.type) on channel \(channel), which the peer never opened")
                }
                guard let open = peerOpen[channel] else { return }
                if case .resourceCancel = frame, open.kind == .stream { throw .channelRule("RESOURCE_CANCEL on stream channel \(channel)") }
                // Data in flight may still come: up to what its window allows.
                endPeerChannel(channel, window: open.completed ? 0 : open.receiveWindow, completed: open.completed)
            } else {
                // The receiver forgets a channel we ended, and closes on a later frame for it.
                guard let open = localOpen[channel] else { throw notOpen(frame) }
                switch (frame, open.kind) {
                case (.resourceCancel, .stream): throw .channelRule("RESOURCE_CANCEL on stream channel \(channel)")
                case (.streamReset, .resource) where open.completed:
                    throw .channelRule("STREAM_RESET on channel \(channel) after RESOURCE_COMPLETE (only RESOURCE_CANCEL may follow)")
                case (.streamReset, .stream) where acknowledgesStreams:
                    // Ours until the receiver acknowledges the end, or resets it too (§7.10).
                    localOpen[channel]?.ending = true
                default: localOpen[channel] = nil
                }
            }
        default:
            break
        }
    }

    /// A frame for a channel of ours that is not open: ended meanwhile (not a bug), or a number
    /// we never opened (a bug).
    private func notOpen(_ frame: Frame) -> SendRefusal {
        let channel = frame.channel
        guard channel % 2 != peerParity, channel != 0, channel <= highestLocalChannel else {
            return .channelRule("\(frame.type) on channel \(channel), which was never opened")
        }
        return .channelEnded("\(frame.type) on channel \(channel), which has ended")
    }

    private mutating func grantConnection(_ increment: UInt32) throws(SendRefusal) {
        guard UInt64(connectionReceiveWindow) + UInt64(increment) <= UInt64(WireLimits.maxWindow) else {
            throw .channelRule("connection window above the largest")
        }
        connectionReceiveWindow += increment
    }

    private mutating func endPeerChannel(_ channel: UInt32, window: UInt32, completed: Bool = false) {
        guard peerOpen.removeValue(forKey: channel) != nil else { return }
        ended.append(EndedChannel(channel: channel, window: window, completed: completed))
        if ended.count > Self.rememberedResets { ended.removeFirst() }
    }

    /// The connection window to give back for data we dropped, once per batch of input; nil when none.
    mutating func takeReplenishment() -> UInt32? {
        guard unreplenished > 0 else { return nil }
        defer { unreplenished = 0 }
        connectionReceiveWindow += unreplenished
        return unreplenished
    }

    // MARK: Rules

    private mutating func peerOpens(_ channel: UInt32, _ kind: Kind) -> Disposition {
        guard channel % 2 == peerParity else {
            return violation(.invalidChannel, "the peer opened channel \(channel), which has the other side's parity")
        }
        guard channel > highestPeerChannel else {
            return violation(.invalidChannel, "the peer opened channel \(channel) after channel \(highestPeerChannel)")
        }
        guard peerOpen.count < WireLimits.maxChannelsOpenedPerSide else {
            return violation(.limitExceeded, "the peer opened a channel while \(peerOpen.count) of its channels were open")
        }
        highestPeerChannel = channel
        peerOpen[channel] = PeerChannel(kind: kind)
        return .opened(channel)
    }

    private func violation(_ code: WireError.Code, _ rule: String) -> Disposition {
        .violation(ConnectionError(.protocolViolation(WireError(code, rule))))
    }

    private func flowViolation(_ frame: Frame, _ channel: UInt32) -> Disposition {
        .violation(ConnectionError(.flowControlViolation("\(frame.type) beyond the window of channel \(channel) or of the connection")))
    }
}
