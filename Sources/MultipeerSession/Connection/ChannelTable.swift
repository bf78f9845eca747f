import MultipeerWire

/// One connection's stream and resource channels as the receiver sees them (docs/PROTOCOL.md
/// §6.2, §7.6): which numbers the peer opened, which are open, which we reset, and the
/// connection's windows. The table checks the rules; the caller decides whether to take a channel
/// the peer opens. Streams and resources will keep their per-channel windows and data here too.
///
/// Memory stays bounded whatever the peer sends: the highest number the peer opened, the
/// channels open (at most 64), and the 64 channels we reset most recently that the peer has not
/// finished itself. That still tells every frame of a compliant peer from a violation: a frame for
/// a channel we reset was sent before the peer read that reset, hence before it read any later
/// one, so when we made the 64th later reset the peer had all of those channels open: 65, over
/// its limit. Only a peer that broke the limit, or kept sending after reading a reset, names a
/// channel that dropped out (docs/PROTOCOL.md §7.6).
struct ChannelTable {
    enum Disposition: Equatable {
        /// The peer opened this channel: the caller takes it, or refuses it with `reset(_:)`.
        case opened(UInt32)
        /// A frame for a channel that is open, for whoever took it.
        case forOpenChannel(UInt32)
        /// Nothing more to do: a window update was applied, or a frame for a channel we reset dropped.
        case handled
        /// GOODBYE with the error's reason, then close.
        case violation(ConnectionError)
    }

    /// A channel we reset. Data the peer sent before it read the reset still arrives and counts
    /// against the window the channel had; we never raise it again.
    private struct ResetChannel {
        let channel: UInt32
        var window: UInt32
    }

    /// As many resets as the peer may have channels open (see the type's comment).
    static let rememberedResets = WireLimits.maxChannelsOpenedPerSide

    /// 1 when the peer is the dialer (odd channels), 0 when it is the listener (even ones).
    private let peerParity: UInt32
    /// The largest channel number the peer has opened; 0 before its first.
    private(set) var highestPeerChannel: UInt32 = 0
    /// Channels the peer opened that neither side has finished or reset; at most 64.
    private(set) var peerOpen: Set<UInt32> = []
    /// Oldest first; at most `rememberedResets`.
    private var resets: [ResetChannel] = []
    /// What we may still send on the connection; the peer's WINDOW_UPDATEs on channel 0 raise it.
    private(set) var connectionSendWindow = WireLimits.initialConnectionWindow
    /// What the peer may still send on the connection before we give some back.
    private(set) var connectionReceiveWindow = WireLimits.initialConnectionWindow
    /// Bytes of discarded data not yet given back to the peer's connection window.
    private var unreplenished: UInt32 = 0

    init(weAreDialer: Bool) {
        peerParity = weAreDialer ? 0 : 1
    }

    /// How many reset channels the table remembers; never above `rememberedResets`.
    var rememberedResetCount: Int { resets.count }

    mutating func received(_ frame: Frame) -> Disposition {
        switch frame {
        case .streamOpen(let channel, _), .resourceOffer(let channel, _):
            return peerOpens(channel)
        case .windowUpdate(0, let increment):
            return raiseConnectionSendWindow(by: increment)
        case .streamData(let channel, let data), .resourceChunk(let channel, let data):
            return onExistingChannel(channel, frame.type, dataBytes: UInt32(data.readableBytes), finishes: false)
        case .windowUpdate(let channel, _):
            return onExistingChannel(channel, frame.type, dataBytes: 0, finishes: false)
        case .streamClose(let channel), .streamReset(let channel, _), .resourceComplete(let channel, _),
            .resourceCancel(let channel, _):
            return onExistingChannel(channel, frame.type, dataBytes: 0, finishes: true)
        case .hello, .trust, .invitation, .invitationResponse, .meshIntroduction, .goodbye, .ping, .pong, .message:
            // Connection-level frames belong to the state machine, which never passes them here.
            return .handled
        }
    }

    /// We reset (or refused) a channel the peer opened: it no longer counts as open, and frames
    /// still in flight for it will be dropped.
    mutating func reset(_ channel: UInt32) {
        guard peerOpen.remove(channel) != nil else { return }
        resets.append(ResetChannel(channel: channel, window: WireLimits.initialChannelWindow))
        if resets.count > Self.rememberedResets { resets.removeFirst() }
    }

    /// The connection window to give back for data we dropped, once per batch of input; nil when none.
    mutating func takeReplenishment() -> UInt32? {
        guard unreplenished > 0 else { return nil }
        defer { unreplenished = 0 }
        connectionReceiveWindow += unreplenished
        return unreplenished
    }

    // MARK: Rules

    private mutating func peerOpens(_ channel: UInt32) -> Disposition {
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
        peerOpen.insert(channel)
        return .opened(channel)
    }

    private mutating func onExistingChannel(_ channel: UInt32, _ type: FrameType, dataBytes: UInt32, finishes: Bool) -> Disposition {
        if let index = resets.firstIndex(where: { $0.channel == channel }) {
            // Dropped, but in-flight data still counts against both windows (§7.6).
            guard dataBytes <= resets[index].window else {
                return flowViolation("\(type) beyond the window of reset channel \(channel)")
            }
            guard dataBytes <= connectionReceiveWindow else { return flowViolation("\(type) beyond the connection window") }
            resets[index].window -= dataBytes
            connectionReceiveWindow -= dataBytes
            unreplenished += dataBytes
            // Finished by the peer as well: nothing more may come for it.
            if finishes { resets.remove(at: index) }
            return .handled
        }
        if peerOpen.contains(channel) {
            // Closed once read (§6.4.11, §6.4.16), and a reset abandons it: it stops counting.
            if finishes { peerOpen.remove(channel) }
            return .forOpenChannel(channel)
        }
        let why =
            if channel % 2 != peerParity { "we opened no channel \(channel)" }
            else if channel > highestPeerChannel { "the peer never opened channel \(channel)" }
            else { "channel \(channel) is neither open nor recently reset" }
        return violation(.invalidChannel, "\(type): \(why)")
    }

    private mutating func raiseConnectionSendWindow(by increment: UInt32) -> Disposition {
        guard UInt64(connectionSendWindow) + UInt64(increment) <= UInt64(WireLimits.maxWindow) else {
            return flowViolation("WINDOW_UPDATE of \(increment) takes the connection window past \(WireLimits.maxWindow)")
        }
        connectionSendWindow += increment
        return .handled
    }

    private func violation(_ code: WireError.Code, _ rule: String) -> Disposition {
        .violation(ConnectionError(.protocolViolation(WireError(code, rule))))
    }

    private func flowViolation(_ rule: String) -> Disposition {
        .violation(ConnectionError(.flowControlViolation(rule)))
    }
}
