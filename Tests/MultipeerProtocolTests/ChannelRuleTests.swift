import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// docs/PROTOCOL.md §7.6 on a connected machine: the peer's channels reach the session, which
/// takes or refuses them; frames for refused channels are dropped; every channel rule is
/// enforced with its GOODBYE.
@Suite("Channel rules once connected (docs/PROTOCOL.md §7.6)")
struct ChannelRuleTests {
    static func data(_ count: Int) -> ByteBuffer { ByteBuffer(repeating: 0x5A, count: count) }
    static let offer = try! ResourceOffer(size: 1_000, transferID: Bytes16(high: 1, low: 2), name: "photo.heic")
    static let digest = try! SHA256Digest(bytes: [UInt8](repeating: 0xD1, count: 32))

    /// The machine as listener (the peer opens odd channels) and as dialer (even ones).
    static let roles: [(machineIsListener: Bool, first: UInt32)] = [(true, 1), (false, 2)]

    private func expectViolation(_ connection: ScriptedConnection, _ reason: GoodbyeReason, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(connection.goodbye == reason, "sent \(connection.sent)", sourceLocation: sourceLocation)
        let closed = connection.machine.isClosed
        #expect(closed, sourceLocation: sourceLocation)
        #expect(connection.closedWith?.goodbyeReason == reason, "closed with \(String(describing: connection.closedWith))", sourceLocation: sourceLocation)
    }

    /// Receives `frames` and refuses every channel they open, as a session that takes none.
    private func receiveRefusing(_ connection: inout ScriptedConnection, _ frames: [Frame]) throws {
        try connection.receive(frames)
        for case .streamOpen(let channel, _) in connection.takeDelivered() { try connection.send([.streamReset(channel: channel, code: .refused)]) }
    }

    private func receiveRefusingAll(_ connection: inout ScriptedConnection, _ frames: [Frame]) throws {
        try connection.receive(frames)
        for frame in connection.takeDelivered() {
            switch frame {
            case .streamOpen(let channel, _), .resourceOffer(let channel, _):
                try connection.send([.streamReset(channel: channel, code: .refused)])
            default: break
            }
        }
    }

    // MARK: Taking and refusing

    @Test(arguments: roles)
    func theSessionGetsTheOpenAndItsData(role: (machineIsListener: Bool, first: UInt32)) throws {
        var connection = try ScriptedConnection(machineIsListener: role.machineIsListener)
        try connection.receive([.streamOpen(channel: role.first, name: "chat"), .streamData(channel: role.first, Self.data(10)), .streamClose(channel: role.first)])
        #expect(connection.takeDelivered() == [
            .streamOpen(channel: role.first, name: "chat"), .streamData(channel: role.first, Self.data(10)), .streamClose(channel: role.first),
        ])
        #expect(connection.takeSent().isEmpty && connection.isConnected)
    }

    @Test(arguments: roles)
    func aRefusalGoesOutAndLaterFramesAreDropped(role: (machineIsListener: Bool, first: UInt32)) throws {
        var connection = try ScriptedConnection(machineIsListener: role.machineIsListener)
        try receiveRefusingAll(&connection, [.resourceOffer(channel: role.first, Self.offer)])
        #expect(connection.takeSent() == [.streamReset(channel: role.first, code: .refused)])
        try connection.receive([.resourceCancel(channel: role.first, reason: .cancelled)])
        #expect(connection.takeDelivered().isEmpty && connection.isConnected)
    }

    /// What the peer sent before it read the refusal is dropped; the data's bytes go back to the
    /// connection window in one WINDOW_UPDATE per read.
    @Test func framesForARefusedChannelAreDiscardedAndTheirBytesGivenBack() throws {
        var connection = try ScriptedConnection()
        try receiveRefusing(&connection, [.streamOpen(channel: 1, name: "chat")])
        #expect(connection.takeSent() == [.streamReset(channel: 1, code: .refused)])
        try connection.receive([.streamData(channel: 1, Self.data(1_000)), .streamData(channel: 1, Self.data(500)), .streamClose(channel: 1)])
        #expect(connection.takeSent() == [.windowUpdate(channel: 0, increment: 1_500)])
        #expect(connection.takeDelivered().isEmpty && connection.isConnected)
    }

    /// Once the peer itself finished a channel, nothing more may come for it.
    @Test func aFrameAfterThePeerFinishedARefusedChannelIsAProtocolError() throws {
        var connection = try ScriptedConnection()
        try receiveRefusing(&connection, [.streamOpen(channel: 1, name: "chat")])
        try connection.receive([.streamClose(channel: 1)])
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
            expectViolation(connection, .protocolError)
        }
    }

    /// Every frame that needs an open channel, on one that was never opened: above the peer's
    /// highest, skipped below it, or of our own parity above the highest we opened.
    @Test func framesForAChannelNeverOpenedAreAProtocolError() throws {
        func frames(on channel: UInt32) -> [Frame] {
            [
                .streamData(channel: channel, Self.data(1)), .streamClose(channel: channel), .streamReset(channel: channel, code: .cancelled),
                .resourceChunk(channel: channel, Self.data(1)), .resourceComplete(channel: channel, sha256: Self.digest),
                .resourceCancel(channel: channel, reason: .cancelled), .windowUpdate(channel: channel, increment: 1),
                .resourceAccept(channel: channel, offset: 0), .resourceReceived(channel: channel),
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
        // Delivered, so the session's scheduler can use it.
        #expect(connection.takeDelivered() == [.windowUpdate(channel: 0, increment: room)])
        try connection.receive([.windowUpdate(channel: 0, increment: 1)])
        expectViolation(connection, .flowControlError)

        var atOnce = try ScriptedConnection()
        try atOnce.receive([.windowUpdate(channel: 0, increment: WireLimits.maxWindow)])
        expectViolation(atOnce, .flowControlError)
    }

    /// Data in flight for a refused channel may use the window the channel had, and no more.
    @Test func dataBeyondARefusedChannelsWindowIsAFlowControlError() throws {
        var connection = try ScriptedConnection()
        try receiveRefusing(&connection, [.streamOpen(channel: 1, name: "bulk")])
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
            // 60 at a time: a session refuses as it reads, and the peer may have 64 open.
            let batch = stride(from: next, to: min(next + 120, 2 * count), by: 2).map { Frame.streamOpen(channel: $0, name: "s") }
            try receiveRefusing(&connection, batch)
            for frame in connection.takeSent() {
                guard case .streamReset(let channel, let code) = frame, code == .refused else {
                    Issue.record("unexpected \(frame)")
                    return
                }
                refused.append(channel)
            }
            #expect(connection.channels.rememberedResetCount <= ChannelTable.rememberedResets)
            next += 120
            if next % 12_000 == 1 { await Task.yield() }  // long and synchronous: leave the shared test threads to others now and then
        }
        #expect(refused == Array(stride(from: 1, to: 2 * count, by: 2)))
        #expect(connection.isConnected)
        #expect(connection.channels.rememberedResetCount == ChannelTable.rememberedResets)
        #expect(connection.channels.peerOpenCount == 0)
        // The most recent refusal is still known (its late data is dropped); the first is long forgotten.
        try connection.receive([.streamData(channel: 2 * count - 1, Self.data(10))])
        #expect(connection.takeSent() == [.windowUpdate(channel: 0, increment: 10)])
        try connection.receive([.streamData(channel: 1, Self.data(10))])
        expectViolation(connection, .protocolError)
    }

    /// A refusal counts as a reply the peer provoked (the handler stops reading past a backlog).
    @Test func refusalsCountAsReplies() throws {
        var connection = try ScriptedConnection()
        let before = connection.machine.replyByteCount
        try receiveRefusing(&connection, [.streamOpen(channel: 1, name: "s")])
        #expect(connection.machine.replyByteCount > before)
    }

    @Test func ourOwnFramesThatBreakTheRulesAreRefused() throws {
        var connection = try ScriptedConnection()  // listener: we open even channels
        let refused: [Frame] = [
            .streamOpen(channel: 1, name: "odd"), .streamData(channel: 2, Self.data(1)), .streamClose(channel: 2),
            .resourceComplete(channel: 2, sha256: Self.digest), .resourceAccept(channel: 1, offset: 0), .resourceReceived(channel: 1),
            // Numbers never opened, which the peer would close on (a fuzz finding): a reset or a
            // cancel on either side's, window for the peer's or for our own, anything on channel 0.
            .streamReset(channel: 1, code: .cancelled), .streamReset(channel: 2, code: .cancelled),
            .resourceCancel(channel: 3, reason: .cancelled), .resourceCancel(channel: 4, reason: .cancelled),
            .streamReset(channel: 0, code: .cancelled), .windowUpdate(channel: 1, increment: 1), .windowUpdate(channel: 2, increment: 1),
        ]
        for frame in refused {
            #expect(throws: SendRefusal.self, "\(frame)") { try connection.machine.send(frame) }
        }
        for frame in [Frame.hello(try Hello(purpose: .answer, preambleEcho: .zero, listenPort: 0, datagramPort: 0, datagramReceiverID: 0, peerID: alicePeer)), .pong(1)] {
            #expect(throws: SendRefusal.unsupported(frame.type)) { try connection.machine.send(frame) }
        }
        try connection.send([.streamOpen(channel: 2, name: "ours"), .streamData(channel: 2, Self.data(1)), .streamClose(channel: 2)])
        #expect(connection.takeSent().count == 3)
        #expect(throws: SendRefusal.self) { try connection.machine.send(.streamOpen(channel: 2, name: "again")) }
        #expect(throws: SendRefusal.self) { try connection.machine.send(.windowUpdate(channel: 2, increment: 1)) }
        // The peer forgets a channel we ended, and closes on a later frame for it.
        #expect(throws: SendRefusal.self) { try connection.machine.send(.streamReset(channel: 2, code: .cancelled)) }
        // A channel the peer opened and we ended may still be named: the opener drops the frame.
        try connection.receive([.streamOpen(channel: 1, name: "theirs")])
        try connection.send([.streamReset(channel: 1, code: .refused), .streamReset(channel: 1, code: .refused), .windowUpdate(channel: 1, increment: 1)])
        #expect(connection.takeSent().count == 3)
        #expect(connection.isConnected)
    }

    /// Our frames must fit the kind and stage of our channel, as the peer judges them (a fuzz
    /// finding: STREAM_CLOSE went out on a resource channel, and the peer closed).
    @Test func ourFramesMustFitTheChannelsKindAndStage() throws {
        var connection = try ScriptedConnection()  // listener: we open even channels
        try connection.send([.resourceOffer(channel: 2, Self.offer), .streamOpen(channel: 4, name: "s")])
        let refused: [Frame] = [
            .streamClose(channel: 2), .streamData(channel: 2, Self.data(1)), .resourceCancel(channel: 4, reason: .cancelled),
            .resourceChunk(channel: 4, Self.data(1)), .resourceComplete(channel: 4, sha256: Self.digest),
            // Before RESOURCE_ACCEPT.
            .resourceChunk(channel: 2, Self.data(1)), .resourceComplete(channel: 2, sha256: Self.digest),
        ]
        for frame in refused {
            #expect(throws: SendRefusal.self, "\(frame)") { try connection.machine.send(frame) }
        }
        // Accepted from byte 900 of 1,000: 100 bytes may follow, then RESOURCE_COMPLETE once.
        try connection.receive([.resourceAccept(channel: 2, offset: 900)])
        #expect(throws: SendRefusal.self) { try connection.machine.send(.resourceChunk(channel: 2, Self.data(101))) }
        try connection.send([.resourceChunk(channel: 2, Self.data(100)), .resourceComplete(channel: 2, sha256: Self.digest)])
        for frame in [Frame.resourceChunk(channel: 2, Self.data(1)), .resourceComplete(channel: 2, sha256: Self.digest), .streamReset(channel: 2, code: .cancelled)] {
            #expect(throws: SendRefusal.self, "\(frame)") { try connection.machine.send(frame) }
        }
        // Cancelling after completing is allowed (the peer remembers the channel for it).
        try connection.send([.resourceCancel(channel: 2, reason: .cancelled), .streamClose(channel: 4)])
        #expect(connection.takeSent().count == 6)
        #expect(connection.isConnected)
    }
}

extension ScriptedConnection {
    var channels: ChannelTable { machine.channels }
}
