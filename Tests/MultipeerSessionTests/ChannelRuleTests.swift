@testable import MultipeerSession
import MultipeerWire
import NIOCore
import Testing

/// docs/PROTOCOL.md §7.6 on a connected machine: streams and resources the peer opens are
/// refused, frames for refused channels dropped, and every channel rule enforced with its GOODBYE.
@Suite("Channel rules once connected (docs/PROTOCOL.md §7.6)")
struct ChannelRuleTests {
    static func data(_ count: Int) -> ByteBuffer { ByteBuffer(repeating: 0x5A, count: count) }
    static let offer = try! ResourceOffer(size: 1_000, name: "photo.heic")
    static let digest = try! SHA256Digest(bytes: [UInt8](repeating: 0xD1, count: 32))

    /// The machine as listener (the peer opens odd channels) and as dialer (even ones).
    static let roles: [(machineIsListener: Bool, first: UInt32)] = [(true, 1), (false, 2)]

    private func expectViolation(_ connection: ScriptedConnection, _ reason: GoodbyeReason, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(connection.goodbye == reason, "sent \(connection.sent)", sourceLocation: sourceLocation)
        let closed = connection.machine.isClosed
        #expect(closed, sourceLocation: sourceLocation)
        #expect(connection.closedWith?.goodbyeReason == reason, "closed with \(String(describing: connection.closedWith))", sourceLocation: sourceLocation)
        #expect(connection.delivered.isEmpty, sourceLocation: sourceLocation)
    }

    // MARK: Refusals

    @Test(arguments: roles)
    func aStreamTheSessionCannotTakeIsRefusedWithStreamReset3(role: (machineIsListener: Bool, first: UInt32)) throws {
        var connection = try ScriptedConnection(machineIsListener: role.machineIsListener)
        try connection.receive([.streamOpen(channel: role.first, name: "chat")])
        #expect(connection.takeSent() == [.streamReset(channel: role.first, code: .refused)])
        #expect(connection.delivered.isEmpty && connection.isConnected)
    }

    @Test(arguments: roles)
    func aResourceOfferIsRefusedWithStreamReset3(role: (machineIsListener: Bool, first: UInt32)) throws {
        var connection = try ScriptedConnection(machineIsListener: role.machineIsListener)
        try connection.receive([.resourceOffer(channel: role.first, Self.offer)])
        #expect(connection.takeSent() == [.streamReset(channel: role.first, code: .refused)])
        #expect(connection.delivered.isEmpty && connection.isConnected)
    }

    /// What the peer sent before it read the refusal is dropped; the data's bytes go back to the
    /// connection window in one WINDOW_UPDATE per read.
    @Test func framesForARefusedChannelAreDiscardedAndTheirBytesGivenBack() throws {
        var connection = try ScriptedConnection()
        try connection.receive([
            .streamOpen(channel: 1, name: "chat"), .streamData(channel: 1, Self.data(1_000)), .streamData(channel: 1, Self.data(500)),
            .windowUpdate(channel: 1, increment: 10), .streamClose(channel: 1),
        ])
        #expect(connection.takeSent() == [.streamReset(channel: 1, code: .refused), .windowUpdate(channel: 0, increment: 1_500)])
        try connection.receive([
            .resourceOffer(channel: 3, Self.offer), .resourceChunk(channel: 3, Self.data(100)),
            .resourceComplete(channel: 3, sha256: Self.digest),
        ])
        #expect(connection.takeSent() == [.streamReset(channel: 3, code: .refused), .windowUpdate(channel: 0, increment: 100)])
        // The peer's own reset or cancel, crossing ours, is dropped too.
        try connection.receive([
            .streamOpen(channel: 5, name: "a"), .streamReset(channel: 5, code: .cancelled),
            .resourceOffer(channel: 7, Self.offer), .resourceCancel(channel: 7, reason: .cancelled),
        ])
        #expect(connection.takeSent() == [.streamReset(channel: 5, code: .refused), .streamReset(channel: 7, code: .refused)])
        #expect(connection.delivered.isEmpty && connection.isConnected)
    }

    /// Once the peer itself finished a channel, nothing more may come for it.
    @Test func aFrameAfterThePeerFinishedARefusedChannelIsAProtocolError() throws {
        var connection = try ScriptedConnection()
        try connection.receive([.streamOpen(channel: 1, name: "chat"), .streamClose(channel: 1)])
        #expect(connection.takeSent() == [.streamReset(channel: 1, code: .refused)])
        try connection.receive([.streamData(channel: 1, Self.data(1))])
        expectViolation(connection, .protocolError)
    }

    // MARK: Channel numbers

    @Test(arguments: roles)
    func aNewChannelWithTheOtherSidesParityIsAProtocolError(role: (machineIsListener: Bool, first: UInt32)) throws {
        for opening in [Frame.streamOpen(channel: role.first + 1, name: "x"), .resourceOffer(channel: role.first + 1, Self.offer)] {
            var connection = try ScriptedConnection(machineIsListener: role.machineIsListener)
            try connection.receive([opening])
            expectViolation(connection, .protocolError)
        }
    }

    @Test func aNewChannelNotAboveThePeersPreviousOneIsAProtocolError() throws {
        let reopenings: [[Frame]] = [
            [.streamOpen(channel: 5, name: "a"), .streamOpen(channel: 3, name: "b")],
            [.streamOpen(channel: 5, name: "a"), .streamOpen(channel: 5, name: "b")],
            // Streams and resources share one space of numbers.
            [.streamOpen(channel: 5, name: "a"), .resourceOffer(channel: 5, Self.offer)],
        ]
        for frames in reopenings {
            var connection = try ScriptedConnection()
            try connection.receive(frames)
            #expect(connection.sent.first == .streamReset(channel: 5, code: .refused))
            expectViolation(connection, .protocolError)
        }
    }

    /// Every frame that needs an open channel, on one that was never opened: above the peer's
    /// highest, skipped below it, or of our own parity (we open none).
    @Test func framesForAChannelNeverOpenedAreAProtocolError() throws {
        func frames(on channel: UInt32) -> [Frame] {
            [
                .streamData(channel: channel, Self.data(1)), .streamClose(channel: channel), .streamReset(channel: channel, code: .cancelled),
                .resourceChunk(channel: channel, Self.data(1)), .resourceComplete(channel: channel, sha256: Self.digest),
                .resourceCancel(channel: channel, reason: .cancelled), .windowUpdate(channel: channel, increment: 1),
            ]
        }
        for channel: UInt32 in [7, 3, 2] {
            for frame in frames(on: channel) {
                var connection = try ScriptedConnection()
                try connection.receive([.streamOpen(channel: 5, name: "a")])
                _ = connection.takeSent()
                try connection.receive([frame])
                expectViolation(connection, .protocolError)
            }
        }
    }

    // MARK: Windows

    @Test func aConnectionWindowPastTheLargestIsAFlowControlError() throws {
        var connection = try ScriptedConnection()
        let room = WireLimits.maxWindow - WireLimits.initialConnectionWindow
        try connection.receive([.windowUpdate(channel: 0, increment: room)])
        #expect(connection.takeSent().isEmpty && connection.isConnected)
        #expect(connection.channels.connectionSendWindow == WireLimits.maxWindow)
        try connection.receive([.windowUpdate(channel: 0, increment: 1)])
        expectViolation(connection, .flowControlError)

        var atOnce = try ScriptedConnection()
        try atOnce.receive([.windowUpdate(channel: 0, increment: WireLimits.maxWindow)])
        expectViolation(atOnce, .flowControlError)
    }

    /// Data in flight for a refused channel may use the window the channel had, and no more.
    @Test func dataBeyondARefusedChannelsWindowIsAFlowControlError() throws {
        var connection = try ScriptedConnection()
        try connection.receive([.streamOpen(channel: 1, name: "bulk")])
        #expect(connection.takeSent() == [.streamReset(channel: 1, code: .refused)])
        let frames = Int(WireLimits.initialChannelWindow) / WireLimits.maxFramePayload
        for _ in 0..<frames {
            try connection.receive([.streamData(channel: 1, Self.data(WireLimits.maxFramePayload))])
            #expect(connection.takeSent() == [.windowUpdate(channel: 0, increment: UInt32(WireLimits.maxFramePayload))])
        }
        try connection.receive([.streamData(channel: 1, Self.data(1))])
        expectViolation(connection, .flowControlError)
    }

    // MARK: Floods and our own sends

    /// 100,000 streams opened and refused: all answered, in order, and the table remembers no
    /// more than 64 of them.
    @Test func aHundredThousandRefusedChannelsKeepTheTableBounded() async throws {
        var connection = try ScriptedConnection()
        let count: UInt32 = 100_000
        var next: UInt32 = 1
        var refused: [UInt32] = []
        while next < 2 * count {
            let batch = stride(from: next, to: min(next + 2_000, 2 * count), by: 2).map { Frame.streamOpen(channel: $0, name: "s") }
            try connection.receive(batch)
            for frame in connection.takeSent() {
                guard case .streamReset(let channel, let code) = frame, code == .refused else {
                    Issue.record("unexpected \(frame)")
                    return
                }
                refused.append(channel)
            }
            #expect(connection.channels.rememberedResetCount <= ChannelTable.rememberedResets)
            next += 2_000
            await Task.yield()  // long and synchronous: leave the shared test threads to others now and then
        }
        #expect(refused == Array(stride(from: 1, to: 2 * count, by: 2)))
        #expect(connection.isConnected && connection.delivered.isEmpty)
        #expect(connection.channels.rememberedResetCount == ChannelTable.rememberedResets)
        #expect(connection.channels.peerOpen.isEmpty)
        // The most recent refusal is still known (its late data is dropped); the first is long forgotten.
        try connection.receive([.streamData(channel: 2 * count - 1, Self.data(10))])
        #expect(connection.takeSent() == [.windowUpdate(channel: 0, increment: 10)])
        try connection.receive([.streamData(channel: 1, Self.data(10))])
        expectViolation(connection, .protocolError)
    }

    @Test func theMachineSendsNoChannelFrameOfItsOwn() throws {
        var connection = try ScriptedConnection()
        for frame in [Frame.streamOpen(channel: 2, name: "x"), .windowUpdate(channel: 0, increment: 1), .resourceOffer(channel: 2, Self.offer)] {
            #expect(throws: SendRefusal.unsupported(frame.type)) { try connection.machine.send(frame) }
        }
    }
}

extension ScriptedConnection {
    var channels: ChannelTable { machine.channels }
}
