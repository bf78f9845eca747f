@testable import MultipeerSession
import MultipeerWire
import NIOCore
import Testing

/// The channel table on its own, where a caller may keep channels open (the connection refuses
/// every one today, so its open-channel limit is only reachable here).
@Suite("Channel table (docs/PROTOCOL.md §7.6)")
struct ChannelTableTests {
    /// The table of a listener: the peer opens odd channels.
    static func listenerTable() -> ChannelTable { ChannelTable(weAreDialer: false) }

    static func open(_ channel: UInt32) -> Frame { .streamOpen(channel: channel, name: "s") }

    static func goodbyeReason(_ disposition: ChannelTable.Disposition) -> GoodbyeReason? {
        if case .violation(let error) = disposition { return error.goodbyeReason }
        return nil
    }

    @Test func sixtyFourOpenChannelsAreTheLimitAndAResetOneNoLongerCounts() {
        var table = Self.listenerTable()
        for index in 0..<UInt32(WireLimits.maxChannelsOpenedPerSide) {
            #expect(table.received(Self.open(2 * index + 1)) == .opened(2 * index + 1))
        }
        #expect(Self.goodbyeReason(table.received(Self.open(201))) == .limitExceeded)

        var refusing = Self.listenerTable()
        for index in 0..<UInt32(WireLimits.maxChannelsOpenedPerSide) { _ = refusing.received(Self.open(2 * index + 1)) }
        refusing.reset(1)
        #expect(refusing.received(Self.open(201)) == .opened(201))
        #expect(refusing.received(.streamData(channel: 3, ByteBuffer(bytes: [1]))) == .forOpenChannel(3))
        // A channel the peer finished no longer counts either, and nothing more may come for it.
        #expect(refusing.received(.streamClose(channel: 3)) == .forOpenChannel(3))
        #expect(refusing.received(Self.open(203)) == .opened(203))
        #expect(Self.goodbyeReason(refusing.received(.streamData(channel: 3, ByteBuffer(bytes: [1])))) == .protocolError)
        #expect(Self.goodbyeReason(refusing.received(Self.open(205))) == .limitExceeded)
    }

    /// Bounded by construction: the highest number, the open channels (none here) and the 64
    /// most recent resets, however many channels the peer opens.
    @Test func refusedChannelsDoNotGrowTheTable() {
        var table = Self.listenerTable()
        for index in 0..<UInt32(100_000) {
            let channel = 2 * index + 1
            #expect(table.received(Self.open(channel)) == .opened(channel))
            table.reset(channel)
            #expect(table.rememberedResetCount <= ChannelTable.rememberedResets)
        }
        #expect(table.peerOpen.isEmpty && table.highestPeerChannel == 199_999)
        #expect(table.rememberedResetCount == ChannelTable.rememberedResets)
        // The 64 most recent are dropped quietly; the 65th most recent is a violation.
        let oldestRemembered: UInt32 = 199_999 - 2 * 63
        #expect(table.received(.streamClose(channel: oldestRemembered)) == .handled)
        #expect(table.rememberedResetCount == ChannelTable.rememberedResets - 1)
        #expect(Self.goodbyeReason(table.received(.streamClose(channel: oldestRemembered - 2))) == .protocolError)
    }

    @Test func droppedDataIsGivenBackOncePerBatch() {
        var table = Self.listenerTable()
        _ = table.received(Self.open(1))
        table.reset(1)
        #expect(table.takeReplenishment() == nil)
        #expect(table.received(.streamData(channel: 1, ByteBuffer(repeating: 0, count: 700))) == .handled)
        #expect(table.received(.resourceChunk(channel: 1, ByteBuffer(repeating: 0, count: 300))) == .handled)
        #expect(table.connectionReceiveWindow == WireLimits.initialConnectionWindow - 1_000)
        #expect(table.takeReplenishment() == 1_000)
        #expect(table.takeReplenishment() == nil)
        #expect(table.connectionReceiveWindow == WireLimits.initialConnectionWindow)
    }
}
