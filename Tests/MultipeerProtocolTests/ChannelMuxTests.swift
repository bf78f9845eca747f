import MultipeerCrypto
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol

/// The session's decisions about one connection's channels (docs/PROTOCOL.md §7.6, §7.8),
/// without the endpoints that carry their bytes.
@Suite("Channel mux: opening, admission, windows")
struct ChannelMuxTests {
    static let limits = ChannelMux.Limits(
        channelReceiveWindow: 1 << 20, connectionReceiveWindow: 4 << 20, maximumIncomingResourceSize: 1 << 30,
        maximumIncomingResourcesPerPeer: 2, maximumConcurrentIncomingResources: 3)

    static func offer(_ size: UInt64 = 1000) -> ResourceOffer {
        try! ResourceOffer(size: size, transferID: .zero, name: "file")
    }

    @Test func ourChannelsStopAtSixtyFourAndNumberBySide() {
        var dialer = ChannelMux(weAreDialer: true, limits: Self.limits)
        var listener = ChannelMux(weAreDialer: false, limits: Self.limits)
        let opened = (0..<WireLimits.maxChannelsOpenedPerSide).compactMap { _ in dialer.open(.stream) }
        #expect(opened.count == 64 && opened.allSatisfy { $0 % 2 == 1 })
        #expect(dialer.open(.resource) == nil)
        #expect(dialer.endOutbound(opened[5]) && !dialer.endOutbound(opened[5]))
        #expect(dialer.open(.resource) != nil)
        #expect(listener.open(.stream) == 2)
    }

    @Test func aStreamIsTakenWithAWiderWindowOrRefusedWhenNobodyReads() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        #expect(mux.peerSent(.streamOpen(channel: 2, name: "s"), accepting: true, incomingResourcesInSession: 0) == .takeStream(
            channel: 2, name: "s", ordinal: nil, reply: [.windowUpdate(channel: 2, increment: (1 << 20) - WireLimits.initialChannelWindow)]))
        #expect(mux.isOpen(2))
        guard case .refuse(4, _, let reply) = mux.peerSent(.streamOpen(channel: 4, name: "t"), accepting: false, incomingResourcesInSession: 0)
        else { Issue.record("not refused"); return }
        #expect(reply == [.streamReset(channel: 4, code: .refused)])
        #expect(!mux.isOpen(4))
    }

    /// Size, per-peer count and session-wide count, in that order; then the shell looks for a file.
    @Test func resourceOffersAreAdmittedWithinEachLimit() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        func decide(_ channel: UInt32, size: UInt64 = 1000, inSession: Int = 0) -> String {
            switch mux.peerSent(.resourceOffer(channel: channel, Self.offer(size)), accepting: true, incomingResourcesInSession: inSession) {
            case .considerResource: "consider"
            case .refuse(_, let reason, _): reason
            default: "other"
            }
        }
        #expect(decide(2, size: (1 << 30) + 1).contains("over the limit"))
        #expect(decide(2, inSession: 3) == "too many incoming resources at once")
        #expect(decide(2) == "consider")
        #expect(mux.incomingResources == 1)
        #expect(mux.resourceTaken(2, offset: 7) == [
            .resourceAccept(channel: 2, offset: 7), .windowUpdate(channel: 2, increment: (1 << 20) - WireLimits.initialChannelWindow),
        ])
        #expect(decide(4) == "consider")
        // Two from this peer, one being considered: the third is refused.
        #expect(decide(6).contains("from this peer"))
        #expect(mux.resourceRefused(4) == [.streamReset(channel: 4, code: .refused)])
        #expect(mux.resourceRefused(4) == [])
        #expect(mux.incomingResources == 1)
        #expect(decide(6) == "consider")
    }

    /// Resources a lost link cut off keep their places while they wait (§7.9): they count against
    /// the peer's share, and the offer that resumes one takes its place over, even at the limits.
    @Test func interruptedResourcesKeepTheirPlacesAndAResumingOfferTakesOneOver() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        func decide(_ channel: UInt32, waiting: Int, resumes: Bool, inSession: Int) -> String {
            let interrupted = ChannelMux.InterruptedResources(waitingFromPeer: waiting, resumesOne: resumes)
            let decision = mux.peerSent(
                .resourceOffer(channel: channel, Self.offer()), accepting: true, incomingResourcesInSession: inSession, interrupted: { _ in interrupted })
            switch decision {
            case .considerResource: return "consider"
            case .refuse(_, let reason, _): return reason
            default: return "other"
            }
        }
        // Two of the peer's wait (the session's three places are all taken): a new offer is refused…
        #expect(decide(2, waiting: 2, resumes: false, inSession: 3).contains("from this peer"))
        #expect(decide(2, waiting: 1, resumes: false, inSession: 3) == "too many incoming resources at once")
        // …and one that resumes a waiting transfer is not.
        #expect(decide(2, waiting: 2, resumes: true, inSession: 3) == "consider")
        // With one on this link and one waiting, the peer has its two.
        #expect(decide(4, waiting: 1, resumes: false, inSession: 2).contains("from this peer"))
    }

    /// Data the peer sent before it learned of our refusal gives the connection's share back.
    @Test func dataForARefusedChannelGivesTheConnectionWindowBack() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        _ = mux.peerSent(.streamOpen(channel: 2, name: "s"), accepting: false, incomingResourcesInSession: 0)
        var given: UInt32 = 0
        for _ in 0..<20 {
            let decision = mux.peerSent(
                .streamData(channel: 2, ByteBuffer(repeating: 1, count: 16_384)), accepting: false, incomingResourcesInSession: 0)
            guard case .giveBack(let frames) = decision else { Issue.record("\(decision)"); return }
            for case .windowUpdate(0, let increment) in frames { given += increment }
            #expect(!frames.contains { $0.channel == 2 })
        }
        #expect(given == 20 * 16_384 / 65_536 * 65_536)
    }

    @Test func framesForOpenChannelsGoToTheirEndpoints() {
        var mux = ChannelMux(weAreDialer: false, limits: Self.limits)
        let ours = mux.open(.resource)!
        _ = mux.peerSent(.streamOpen(channel: 1, name: "s"), accepting: true, incomingResourcesInSession: 0)
        #expect(mux.peerSent(.resourceAccept(channel: ours, offset: 0), accepting: true, incomingResourcesInSession: 0) == .toOutbound(ours, ended: false))
        #expect(mux.peerSent(.streamData(channel: 1, ByteBuffer(bytes: [1])), accepting: true, incomingResourcesInSession: 0) == .toInbound(1, ended: false))
        #expect(mux.isOpen(1) && mux.isOpen(ours))
        #expect(mux.peerSent(.streamClose(channel: 1), accepting: true, incomingResourcesInSession: 0) == .toInbound(1, ended: true))
        #expect(mux.peerSent(.resourceReceived(channel: ours), accepting: true, incomingResourcesInSession: 0) == .toOutbound(ours, ended: true))
        #expect(!mux.isOpen(1) && !mux.isOpen(ours))
        // What crosses the end is the endpoint's no more.
        #expect(mux.peerSent(.streamReset(channel: 1, code: .cancelled), accepting: true, incomingResourcesInSession: 0) == .giveBack([]))
    }

    /// §7.6, §7.8: which frame ends a channel, whichever side sends it; the mux ends it, the
    /// endpoints only act on it.
    @Test(arguments: [
        (Frame.streamClose(channel: 1), ChannelMux.Kind.stream, true, true),
        (.streamData(channel: 1, ByteBuffer(bytes: [1])), .stream, true, false),
        (.streamReset(channel: 1, code: .cancelled), .stream, true, true),
        (.streamReset(channel: 1, code: .cancelled), .stream, false, true),
        (.streamReset(channel: 1, code: .refused), .resource, false, true),
        (.resourceCancel(channel: 1, reason: .cancelled), .resource, true, true),
        (.resourceCancel(channel: 1, reason: .integrityFailure), .resource, false, true),
        (.resourceComplete(channel: 1, sha256: try! SHA256Digest(bytes: [UInt8](repeating: 0, count: 32))), .resource, true, false),
        (.resourceAccept(channel: 1, offset: 0), .resource, false, false),
        (.resourceReceived(channel: 1), .resource, false, true),
        (.resourceChunk(channel: 1, ByteBuffer(bytes: [1])), .resource, true, false),
    ])
    func theMuxSaysWhichFramesEndAChannel(frame: Frame, kind: ChannelMux.Kind, sentByOpener: Bool, ends: Bool) {
        #expect(ChannelMux.ends(frame, of: kind, sentByOpener: sentByOpener) == ends)
        // Our own frame on a channel of ours or of the peer's ends it here as the rule says,
        // and only while it is open.
        var mux = ChannelMux(weAreDialer: sentByOpener, limits: Self.limits)
        if sentByOpener {
            #expect(mux.open(kind) == 1)
        } else if kind == .stream {
            _ = mux.peerSent(.streamOpen(channel: 1, name: "s"), accepting: true, incomingResourcesInSession: 0)
        } else {
            let offer = try! ResourceOffer(size: 1, transferID: .zero, name: "r")
            _ = mux.peerSent(.resourceOffer(channel: 1, offer), accepting: true, incomingResourcesInSession: 0)
            _ = mux.resourceTaken(1, offset: 0)
        }
        #expect(mux.weSend(frame) == ends)
        #expect(mux.isOpen(1) == !ends)
        if ends { #expect(mux.weSend(frame) == nil) }
    }

    /// A window update lets a blocked channel of ours go again.
    @Test func windowUpdatesServeOurBlockedChannels() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        let channel = mux.open(.stream)!
        mux.markReady(channel)
        let first = mux.next()
        #expect(first?.channel == channel && first?.allowance == min(Int(WireLimits.initialChannelWindow), Frame.largestSentPayload))
        mux.served(channel, .data(Int(WireLimits.initialChannelWindow)))
        mux.markReady(channel)
        #expect(mux.next()?.allowance == 0)
        mux.served(channel, .blocked)
        #expect(mux.next() == nil)
        #expect(mux.peerSent(.windowUpdate(channel: channel, increment: 100), accepting: true, incomingResourcesInSession: 0) == .serve)
        #expect(mux.next()?.allowance == 100)
    }

    /// docs/PROTOCOL.md §7.8's construction; the expected value was computed with Python's hashlib:
    /// sha256(b"mpcp-resource-id" + receiver + source + (12345).to_bytes(8, "big") + (42).to_bytes(8, "big"))[:16].
    @Test func theTransferIDIsTheSpecsHash() throws {
        let receiver = Bytes16(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)
        let id = ChannelMux.transferID(receiver: receiver, sourceIdentity: "file:///tmp/a%20b.txt", size: 12_345, modified: 42)
        #expect(id.description == "b00a68a04347062ee01d29c7a1c00daf")
    }

    /// A RESUMED offer answered with a remembered verdict takes no place: refused at the limit,
    /// its sender would report a delivered file as failed (docs/PROTOCOL.md §7.9).
    @Test func anOfferAnsweredFromMemoryPassesTheLimits() {
        var mux = ChannelMux(weAreDialer: true, limits: Self.limits)
        let full = ChannelMux.InterruptedResources(waitingFromPeer: Self.limits.maximumIncomingResourcesPerPeer, resumesOne: false)
        guard case .refuse = mux.peerSent(.resourceOffer(channel: 2, Self.offer()), accepting: true, incomingResourcesInSession: 0, interrupted: { _ in full }) else {
            Issue.record("a new offer passed a full limit")
            return
        }
        var remembered = full
        remembered.answeredFromMemory = true
        #expect(mux.peerSent(.resourceOffer(channel: 4, Self.offer()), accepting: true, incomingResourcesInSession: 99, interrupted: { _ in remembered })
            == .considerResource(channel: 4, Self.offer()))
    }
}
