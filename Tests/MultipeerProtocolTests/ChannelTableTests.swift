import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// The channel table on its own (docs/PROTOCOL.md §7.6, §7.8): limits, who may send what on a
/// channel, resource byte counts, and the memory bound on ended channels.
@Suite("Channel table (docs/PROTOCOL.md §7.6)")
struct ChannelTableTests {
    /// The table of a listener: the peer opens odd channels, we open even ones.
    static func listenerTable() -> ChannelTable { ChannelTable(weAreDialer: false) }

    static func open(_ channel: UInt32) -> Frame { .streamOpen(channel: channel, name: "s") }
    static func offer(_ channel: UInt32, size: UInt64 = 1_000) -> Frame {
        .resourceOffer(channel: channel, try! ResourceOffer(size: size, transferID: .zero, name: "r"))
    }
    static func bytes(_ count: Int) -> ByteBuffer { ByteBuffer(repeating: 7, count: count) }
    static let digest = try! SHA256Digest(bytes: [UInt8](repeating: 1, count: 32))

    static func goodbyeReason(_ disposition: ChannelTable.Disposition) -> GoodbyeReason? {
        if case .violation(let error) = disposition { return error.goodbyeReason }
        return nil
    }

    @Test func sixtyFourOpenChannelsAreTheLimitAndAResetOneNoLongerCounts() throws {
        var table = Self.listenerTable()
        for index in 0..<UInt32(WireLimits.maxChannelsOpenedPerSide) {
            #expect(table.received(Self.open(2 * index + 1)) == .opened(2 * index + 1))
        }
        #expect(Self.goodbyeReason(table.received(Self.open(201))) == .limitExceeded)

        var refusing = Self.listenerTable()
        for index in 0..<UInt32(WireLimits.maxChannelsOpenedPerSide) { _ = refusing.received(Self.open(2 * index + 1)) }
        try refusing.sending(.streamReset(channel: 1, code: .refused))
        #expect(refusing.received(Self.open(201)) == .opened(201))
        #expect(refusing.received(.streamData(channel: 3, Self.bytes(1))) == .forOpenChannel(3))
        // A channel the peer finished no longer counts either, and nothing more may come for it.
        #expect(refusing.received(.streamClose(channel: 3)) == .forOpenChannel(3))
        #expect(refusing.received(Self.open(203)) == .opened(203))
        #expect(Self.goodbyeReason(refusing.received(.streamData(channel: 3, Self.bytes(1)))) == .protocolError)
        #expect(Self.goodbyeReason(refusing.received(Self.open(205))) == .limitExceeded)
    }

    /// Bounded by construction: the highest number, the open channels (none here) and the 64
    /// most recent ended ones, however many channels the peer opens.
    @Test func refusedChannelsDoNotGrowTheTable() throws {
        var table = Self.listenerTable()
        for index in 0..<UInt32(100_000) {
            let channel = 2 * index + 1
            #expect(table.received(Self.open(channel)) == .opened(channel))
            try table.sending(.streamReset(channel: channel, code: .refused))
            #expect(table.rememberedResetCount <= ChannelTable.rememberedResets)
        }
        #expect(table.peerOpenCount == 0 && table.highestPeerChannel == 199_999)
        #expect(table.rememberedResetCount == ChannelTable.rememberedResets)
        // The 64 most recent are dropped quietly; the 65th most recent is a violation.
        let oldestRemembered: UInt32 = 199_999 - 2 * 63
        #expect(table.received(.streamClose(channel: oldestRemembered)) == .handled)
        #expect(table.rememberedResetCount == ChannelTable.rememberedResets - 1)
        #expect(Self.goodbyeReason(table.received(.streamClose(channel: oldestRemembered - 2))) == .protocolError)
    }

    @Test func droppedDataIsGivenBackOncePerBatch() throws {
        var table = Self.listenerTable()
        _ = table.received(Self.open(1))
        try table.sending(.streamReset(channel: 1, code: .refused))
        #expect(table.takeReplenishment() == nil)
        #expect(table.received(.streamData(channel: 1, Self.bytes(700))) == .handled)
        #expect(table.received(.streamData(channel: 1, Self.bytes(300))) == .handled)
        #expect(table.connectionReceiveWindow == WireLimits.initialConnectionWindow - 1_000)
        #expect(table.takeReplenishment() == 1_000)
        #expect(table.takeReplenishment() == nil)
        #expect(table.connectionReceiveWindow == WireLimits.initialConnectionWindow)
    }

    // MARK: Who sends what

    @Test func onlyTheReceiverSendsWindowUpdatesAcceptsAndReceipts() {
        for frame in [Frame.windowUpdate(channel: 1, increment: 1), .resourceAccept(channel: 1, offset: 0), .resourceReceived(channel: 1)] {
            var table = Self.listenerTable()
            _ = table.received(Self.offer(1))
            #expect(Self.goodbyeReason(table.received(frame)) == .protocolError, "\(frame)")
        }
    }

    @Test func onlyTheOpenerSendsDataAndEndsOnOurChannels() throws {
        let fromReceiver: [Frame] = [
            .streamData(channel: 2, Self.bytes(1)), .streamClose(channel: 2), .resourceChunk(channel: 2, Self.bytes(1)),
            .resourceComplete(channel: 2, sha256: Self.digest), .streamOpen(channel: 2, name: "x"),
        ]
        for frame in fromReceiver {
            var table = Self.listenerTable()
            try table.sending(.streamOpen(channel: 2, name: "ours"))
            #expect(Self.goodbyeReason(table.received(frame)) == .protocolError, "\(frame)")
        }
    }

    @Test func framesOfTheWrongKindForTheChannelAreProtocolErrors() {
        let cases: [(Frame, Frame)] = [
            (Self.open(1), .resourceChunk(channel: 1, Self.bytes(1))),
            (Self.open(1), .resourceComplete(channel: 1, sha256: Self.digest)),
            (Self.open(1), .resourceCancel(channel: 1, reason: .cancelled)),
            (Self.offer(1), .streamData(channel: 1, Self.bytes(1))),
            (Self.offer(1), .streamClose(channel: 1)),
        ]
        for (opening, frame) in cases {
            var table = Self.listenerTable()
            _ = table.received(opening)
            #expect(Self.goodbyeReason(table.received(frame)) == .protocolError, "\(frame) after \(opening)")
        }
    }

    // MARK: Resources

    @Test func aChunkBeforeAcceptIsAProtocolError() {
        var table = Self.listenerTable()
        _ = table.received(Self.offer(1))
        #expect(Self.goodbyeReason(table.received(.resourceChunk(channel: 1, Self.bytes(1)))) == .protocolError)
    }

    @Test func chunksMayAddUpToSizeMinusOffsetAndNoMore() throws {
        var table = Self.listenerTable()
        _ = table.received(Self.offer(1, size: 1_000))
        try table.sending(.resourceAccept(channel: 1, offset: 400))
        #expect(table.received(.resourceChunk(channel: 1, Self.bytes(600))) == .forOpenChannel(1))
        #expect(Self.goodbyeReason(table.received(.resourceChunk(channel: 1, Self.bytes(1)))) == .protocolError)
    }

    @Test func afterCompleteOnlyACancelMayCome() throws {
        var table = Self.listenerTable()
        _ = table.received(Self.offer(1, size: 10))
        try table.sending(.resourceAccept(channel: 1, offset: 0))
        #expect(table.received(.resourceChunk(channel: 1, Self.bytes(10))) == .forOpenChannel(1))
        #expect(table.received(.resourceComplete(channel: 1, sha256: Self.digest)) == .forOpenChannel(1))
        #expect(Self.goodbyeReason(table.received(.resourceComplete(channel: 1, sha256: Self.digest))) == .protocolError)
        // Our verdict ends it; the opener's cancel crossing it is dropped, and ends it for good.
        try table.sending(.resourceReceived(channel: 1))
        #expect(table.received(.resourceCancel(channel: 1, reason: .cancelled)) == .handled)
        #expect(Self.goodbyeReason(table.received(.resourceCancel(channel: 1, reason: .cancelled))) == .protocolError)
    }

    /// Found by the independent Python peer: a chunk after our RESOURCE_RECEIVED got GOODBYE 3
    /// (the remembered channel had no window), where §10 says GOODBYE 1.
    @Test func anythingButACancelAfterOurVerdictIsAProtocolError() throws {
        let late: [Frame] = [
            .resourceChunk(channel: 1, Self.bytes(1)), .resourceChunk(channel: 1, Self.bytes(0)),
            .resourceComplete(channel: 1, sha256: Self.digest), .streamReset(channel: 1, code: .cancelled),
            .streamData(channel: 1, Self.bytes(1)),
        ]
        for verdict in [Frame.resourceReceived(channel: 1), .resourceCancel(channel: 1, reason: .integrityFailure)] {
            for frame in late {
                var table = Self.listenerTable()
                _ = table.received(Self.offer(1, size: 10))
                try table.sending(.resourceAccept(channel: 1, offset: 0))
                _ = table.received(.resourceChunk(channel: 1, Self.bytes(10)))
                _ = table.received(.resourceComplete(channel: 1, sha256: Self.digest))
                try table.sending(verdict)
                #expect(Self.goodbyeReason(table.received(frame)) == .protocolError, "\(frame) after \(verdict)")
            }
        }
    }

    /// A channel we reset before the opener completed: its RESOURCE_COMPLETE crossing the reset is
    /// dropped, and then only its RESOURCE_CANCEL may follow.
    @Test func aCompleteCrossingOurResetLeavesOnlyACancel() throws {
        var table = Self.listenerTable()
        _ = table.received(Self.offer(1, size: 10))
        try table.sending(.resourceAccept(channel: 1, offset: 0))
        try table.sending(.resourceCancel(channel: 1, reason: .cancelled))
        #expect(table.received(.resourceChunk(channel: 1, Self.bytes(10))) == .handled)
        #expect(table.received(.resourceComplete(channel: 1, sha256: Self.digest)) == .handled)
        #expect(Self.goodbyeReason(table.received(.resourceChunk(channel: 1, Self.bytes(0)))) == .protocolError)
    }

    @Test func theOpenersAcceptRules() throws {
        var twice = Self.listenerTable()
        try twice.sending(Self.offer(2, size: 100))
        #expect(twice.received(.resourceAccept(channel: 2, offset: 0)) == .forOpenChannel(2))
        #expect(Self.goodbyeReason(twice.received(.resourceAccept(channel: 2, offset: 0))) == .protocolError)

        var beyond = Self.listenerTable()
        try beyond.sending(Self.offer(2, size: 100))
        #expect(Self.goodbyeReason(beyond.received(.resourceAccept(channel: 2, offset: 101))) == .protocolError)

        var early = Self.listenerTable()
        try early.sending(Self.offer(2, size: 100))
        _ = early.received(.resourceAccept(channel: 2, offset: 0))
        #expect(Self.goodbyeReason(early.received(.resourceReceived(channel: 2))) == .protocolError)

        // We may not send a chunk before the accept, nor beyond the window.
        var sender = Self.listenerTable()
        try sender.sending(Self.offer(2, size: 1 << 20))
        #expect(throws: SendRefusal.self) { try sender.sending(.resourceChunk(channel: 2, Self.bytes(1))) }
        _ = sender.received(.resourceAccept(channel: 2, offset: 0))
        for _ in 0..<4 { try sender.sending(.resourceChunk(channel: 2, Self.bytes(65_536))) }
        #expect(throws: SendRefusal.self) { try sender.sending(.resourceChunk(channel: 2, Self.bytes(1))) }
        #expect(sender.received(.windowUpdate(channel: 2, increment: 1)) == .forOpenChannel(2))
        try sender.sending(.resourceChunk(channel: 2, Self.bytes(1)))
    }

    @Test func framesForOurEndedChannelsAreDroppedAndUnopenedOnesAreViolations() throws {
        var table = Self.listenerTable()
        try table.sending(.streamOpen(channel: 2, name: "a"))
        try table.sending(.streamClose(channel: 2))
        #expect(table.received(.windowUpdate(channel: 2, increment: 5)) == .handled)
        #expect(table.received(.streamReset(channel: 2, code: .cancelled)) == .handled)
        #expect(Self.goodbyeReason(table.received(.windowUpdate(channel: 4, increment: 5))) == .protocolError)
    }

    // MARK: Windows

    @Test func dataBeyondAChannelOrTheConnectionWindowIsAFlowControlError() throws {
        var channelOver = Self.listenerTable()
        _ = channelOver.received(Self.open(1))
        for _ in 0..<4 { #expect(channelOver.received(.streamData(channel: 1, Self.bytes(65_536))) == .forOpenChannel(1)) }
        #expect(Self.goodbyeReason(channelOver.received(.streamData(channel: 1, Self.bytes(1)))) == .flowControlError)

        // Granted window lets more in.
        var granted = Self.listenerTable()
        _ = granted.received(Self.open(1))
        for _ in 0..<4 { _ = granted.received(.streamData(channel: 1, Self.bytes(65_536))) }
        try granted.sending(.windowUpdate(channel: 1, increment: 10))
        #expect(granted.received(.streamData(channel: 1, Self.bytes(10))) == .forOpenChannel(1))

        // Five channels of 256 KiB each: the fifth goes past the connection's 1 MiB.
        var connectionOver = Self.listenerTable()
        for index in 0..<UInt32(5) { _ = connectionOver.received(Self.open(2 * index + 1)) }
        for index in 0..<UInt32(4) {
            for _ in 0..<4 { _ = connectionOver.received(.streamData(channel: 2 * index + 1, Self.bytes(65_536))) }
        }
        #expect(Self.goodbyeReason(connectionOver.received(.streamData(channel: 9, Self.bytes(1)))) == .flowControlError)
    }

    @Test func windowsPastTheLargestAreFlowControlErrors() throws {
        var connection = Self.listenerTable()
        #expect(connection.received(.windowUpdate(channel: 0, increment: WireLimits.maxWindow - WireLimits.initialConnectionWindow)) == .handled)
        #expect(connection.connectionSendWindow == WireLimits.maxWindow)
        #expect(Self.goodbyeReason(connection.received(.windowUpdate(channel: 0, increment: 1))) == .flowControlError)

        var channel = Self.listenerTable()
        try channel.sending(.streamOpen(channel: 2, name: "a"))
        #expect(Self.goodbyeReason(channel.received(.windowUpdate(channel: 2, increment: WireLimits.maxWindow))) == .flowControlError)
    }
}
