import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOEmbedded
import Synchronization
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Two EmbeddedChannels back to back, each with a ConnectionHandler: complete handshakes in memory.
final class EmbeddedPair {
    let loop = EmbeddedEventLoop()
    let dialer: EmbeddedChannel
    let listenerChannel: EmbeddedChannel

    init(
        dialerTrust: ConnectionHandler.TrustEvaluator? = nil, listenerTrust: ConnectionHandler.TrustEvaluator? = nil,
        dialerIdentity: SecurityIdentity? = nil, listenerIdentity: SecurityIdentity? = nil,
        dialerPreference: WireEncryptionPreference = .required, listenerPreference: WireEncryptionPreference = .required,
        trustTimeout: TimeAmount = .seconds(5), dialerTrustTimeout: TimeAmount? = nil
    ) throws {
        dialer = EmbeddedChannel(loop: loop)
        listenerChannel = EmbeddedChannel(loop: loop)
        try dialer.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: dialerPreference, tls: TLSContext(identity: dialerIdentity)),
            trustEvaluator: dialerTrust, trustTimeout: dialerTrustTimeout ?? trustTimeout))
        try listenerChannel.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: listenerPreference, tls: TLSContext(identity: listenerIdentity)),
            trustEvaluator: listenerTrust, trustTimeout: trustTimeout))
    }

    func activate() throws {
        try dialer.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try listenerChannel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2)).wait()
        try pump()
    }

    /// Moves bytes both ways until quiet.
    func pump() throws {
        var moved = true
        while moved {
            moved = false
            while let bytes = try dialer.readOutbound(as: ByteBuffer.self) {
                if listenerChannel.isActive { try listenerChannel.writeInbound(bytes) }
                moved = true
            }
            while let bytes = try listenerChannel.readOutbound(as: ByteBuffer.self) {
                if dialer.isActive { try dialer.writeInbound(bytes) }
                moved = true
            }
        }
    }

    static func events(_ channel: EmbeddedChannel) throws -> [ConnectionEvent] {
        var events: [ConnectionEvent] = []
        while let event = try channel.readInbound(as: ConnectionEvent.self) { events.append(event) }
        return events
    }
}

extension ConnectionEvent {
    var closeError: ConnectionError? {
        if case .closed(let error) = self { return error }
        return nil
    }

    var isEstablished: Bool {
        if case .established = self { return true }
        return false
    }
}

@Suite("ConnectionHandler on EmbeddedChannel")
struct ConnectionHandlerTests {
    static let pki = try! TestPKI()

    @Test func handshakeAndFramesThroughThePipeline() throws {
        let pair = try EmbeddedPair(dialerIdentity: try Self.pki.peer("alice"), listenerIdentity: try Self.pki.peer("bob"))
        try pair.activate()
        #expect(try EmbeddedPair.events(pair.dialer).contains { $0.isEstablished })
        #expect(try EmbeddedPair.events(pair.listenerChannel).contains { $0.isEstablished })
        try pair.dialer.writeOutbound(Frame.message(ByteBuffer(string: "through NIO"), isEnd: true))
        try pair.pump()
        let received = try EmbeddedPair.events(pair.listenerChannel)
        guard case .frame(.message(let payload, true))? = received.first else {
            Issue.record("no message: \(received)")
            return
        }
        #expect(String(buffer: payload) == "through NIO")
    }

    /// The engine hands frames to the handler directly; they must take the same path as frames
    /// written through the pipeline, in order with them, and stop once the handler is removed.
    @Test func framesWrittenStraightToTheHandlerKeepTheirOrder() throws {
        let pair = try EmbeddedPair(dialerIdentity: try Self.pki.peer("alice"), listenerIdentity: try Self.pki.peer("bob"))
        let handler = try pair.dialer.pipeline.syncOperations.handler(type: ConnectionHandler.self)
        try pair.activate()
        #expect(try EmbeddedPair.events(pair.dialer).contains { $0.isEstablished })
        _ = try EmbeddedPair.events(pair.listenerChannel)

        for index in 0..<6 {
            let frame = Frame.message(ByteBuffer(string: "frame \(index)"), isEnd: true)
            if index.isMultiple(of: 2) {
                #expect(handler.write(frame))
            } else {
                pair.dialer.write(frame, promise: nil)
            }
        }
        #expect(handler.flush())
        try pair.pump()
        let payloads = try EmbeddedPair.events(pair.listenerChannel).compactMap { event -> String? in
            if case .frame(.message(let payload, true)) = event { return String(buffer: payload) }
            return nil
        }
        #expect(payloads == (0..<6).map { "frame \($0)" })

        _ = try pair.dialer.pipeline.syncOperations.removeHandler(handler).wait()
        #expect(!handler.write(Frame.message(ByteBuffer(string: "late"), isEnd: true)))
        #expect(!handler.flush())
    }

    @Test(arguments: HandshakeMatrix.cases)
    func everyPreferencePairThroughThePipeline(testCase: HandshakeMatrix.Case) throws {
        let pair = try EmbeddedPair(
            dialerIdentity: testCase.dialerHasIdentity ? HandshakeMatrix.alice : nil,
            listenerIdentity: testCase.listenerHasIdentity ? HandshakeMatrix.bob : nil,
            dialerPreference: testCase.dialer, listenerPreference: testCase.listener)
        try pair.activate()
        let dialerEvents = try EmbeddedPair.events(pair.dialer)
        let listenerEvents = try EmbeddedPair.events(pair.listenerChannel)
        if testCase.expected == "refused" {
            #expect(dialerEvents.compactMap(\.closeError) == [ConnectionError(.encryptionIncompatible)])
            #expect(listenerEvents.compactMap(\.closeError) == [ConnectionError(.encryptionIncompatible)])
            #expect(!pair.dialer.isActive && !pair.listenerChannel.isActive)
        } else {
            let encrypted = testCase.expected == "tls"
            let established = (dialerEvents + listenerEvents).compactMap { event -> EstablishedConnection? in
                if case .established(let connection) = event { return connection }
                return nil
            }
            #expect(established.count == 2)
            #expect(established.allSatisfy { $0.isEncrypted == encrypted })
        }
    }

    @Test func trustTimeoutOnTheDialerSide() throws {
        let pair = try EmbeddedPair(dialerTrust: { _, _ in })
        try pair.activate()
        pair.loop.advanceTime(by: .seconds(5))
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError) == [ConnectionError(.trustTimedOutLocally)])
        #expect(try EmbeddedPair.events(pair.listenerChannel).compactMap(\.closeError) == [ConnectionError(.trustRejectedByPeer(.timedOut))])
    }

    @Test func writingBeforeConnectedFailsThePromise() throws {
        let pair = try EmbeddedPair(listenerTrust: { _, _ in })  // the listener never answers
        try pair.activate()
        #expect(throws: SendRefusal.notConnected) {
            try pair.listenerChannel.writeOutbound(Frame.message(ByteBuffer(string: "early"), isEnd: true))
        }
    }

    @Test func trustTimeoutClosesBothSides() throws {
        let pair = try EmbeddedPair(listenerTrust: { _, _ in })
        try pair.activate()
        #expect(try EmbeddedPair.events(pair.listenerChannel).isEmpty)
        pair.loop.advanceTime(by: .seconds(5))
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.listenerChannel).compactMap(\.closeError) == [ConnectionError(.trustTimedOutLocally)])
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError) == [ConnectionError(.trustRejectedByPeer(.timedOut))])
        #expect(!pair.listenerChannel.isActive)
    }

    @Test func anAnswerGivenLaterStillCounts() throws {
        let answers = PendingAnswers()
        let pair = try EmbeddedPair(listenerTrust: { _, answer in answers.store(answer) })
        try pair.activate()
        #expect(try !EmbeddedPair.events(pair.dialer).contains { $0.isEstablished })
        answers.answerAll(true)
        pair.loop.run()
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.dialer).contains { $0.isEstablished })
        #expect(try EmbeddedPair.events(pair.listenerChannel).contains { $0.isEstablished })
    }

    @Test func silentPeerHitsTheHandshakeDeadline() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: TLSContext(identity: nil)),
            handshakeTimeout: .seconds(10)))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        _ = try channel.readOutbound(as: ByteBuffer.self)  // our preamble
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try EmbeddedPair.events(channel).compactMap(\.closeError) == [ConnectionError(.handshakeTimedOut)])
        #expect(!channel.isActive)
    }

    /// An inviter whose advertiser hangs gives up at the invitation's timeout plus 2 s (§7.2),
    /// not plus the whole 10 s handshake budget (SPEC-GAPS 21: 11 s for a 1 s invitation).
    @Test func anInviterGivesUpShortlyAfterTheInvitationsTimeout() throws {
        let loop = EmbeddedEventLoop()
        let inviter = EmbeddedChannel(loop: loop)
        let advertiser = EmbeddedChannel(loop: loop)
        try inviter.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: TLSContext(identity: nil),
                purpose: .invitation, expectedPeer: bobPeer.identifier,
                invitation: try Invitation(timeoutMilliseconds: 1_000, context: ByteBuffer())),
            handshakeTimeout: .seconds(10)))
        try advertiser.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .optional, tls: TLSContext(identity: nil)),
            admission: { hello, _ in Advertiser<Int>.admission(hello) }, handshakeTimeout: .seconds(10)))
        try inviter.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        try advertiser.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2)).wait()
        // Bytes move until the advertiser has the invitation; from then on it is silent.
        var received = false
        for _ in 0..<20 where !received {
            while let bytes = try inviter.readOutbound(as: ByteBuffer.self) { try advertiser.writeInbound(bytes) }
            while let event = try advertiser.readInbound(as: ConnectionEvent.self) {
                if case .invitationReceived = event { received = true }
            }
            // Its HELLO answer still goes; the application's answer never comes.
            while let bytes = try advertiser.readOutbound(as: ByteBuffer.self) { try inviter.writeInbound(bytes) }
        }
        try #require(received)
        loop.advanceTime(by: .milliseconds(2_999))
        #expect(inviter.isActive)
        #expect(try EmbeddedPair.events(inviter).compactMap(\.closeError).isEmpty)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try EmbeddedPair.events(inviter).compactMap(\.closeError) == [ConnectionError(.handshakeTimedOut)])
        #expect(!inviter.isActive)
    }

    @Test func closingTheChannelSaysGoodbye() throws {
        let pair = try EmbeddedPair()
        try pair.activate()
        _ = try EmbeddedPair.events(pair.listenerChannel)
        try pair.dialer.close().wait()
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.listenerChannel).compactMap(\.closeError) == [ConnectionError(.peerSaidGoodbye(.normal))])
    }
}

/// Holds trust completions so a test can answer them later, as an app's UI would.
final class PendingAnswers: Sendable {
    private let answers = Mutex<[@Sendable (Bool) -> Void]>([])
    func store(_ answer: @escaping @Sendable (Bool) -> Void) { answers.withLock { $0.append(answer) } }
    func answerAll(_ accepted: Bool) { answers.withLock { $0 }.forEach { $0(accepted) } }
}

@Suite("ConnectionHandler deadlines around the trust step")
struct TrustDeadlineTests {
    @Test func aSlowButTimelyDecisionIsNotCutOffByTheHandshakeDeadline() throws {
        let answers = PendingAnswers()
        let pair = try EmbeddedPair(listenerTrust: { _, answer in answers.store(answer) }, trustTimeout: .seconds(20))
        try pair.activate()
        // The handshake deadline is 10 s; it must not count the application's thinking time.
        pair.loop.advanceTime(by: .seconds(9))
        pair.loop.advanceTime(by: .seconds(3))
        answers.answerAll(true)
        pair.loop.run()
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.listenerChannel).contains { $0.isEstablished })
    }

    @Test func aPeerThatNeverAnswersTrustIsDroppedAfterTheTrustTimeout() throws {
        // The listener's evaluator accepts; the dialer never sends TRUST (its app never answers and
        // its timer is far away), so the listener must give up on its own.
        let pair = try EmbeddedPair(dialerTrust: { _, _ in }, listenerTrust: { _, answer in answer(true) }, dialerTrustTimeout: .seconds(3_600))
        try pair.activate()
        // The listener waits its trust timeout (5 s) plus the handshake budget (10 s).
        pair.loop.advanceTime(by: .seconds(14))
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.listenerChannel).isEmpty)
        pair.loop.advanceTime(by: .seconds(1))
        try pair.pump()
        #expect(try EmbeddedPair.events(pair.listenerChannel).compactMap(\.closeError) == [ConnectionError(.handshakeTimedOut)])
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError) == [ConnectionError(.peerSaidGoodbye(.timedOut))])
    }
}

@Suite("Keepalive and dead peers")
struct KeepaliveTests {
    @Test func idlePeersPingEachOtherAndStayConnected() throws {
        let pair = try EmbeddedPair()
        try pair.activate()
        _ = try EmbeddedPair.events(pair.dialer)
        for _ in 0..<40 {  // 20 s of virtual time in 0.5 s steps, with bytes flowing both ways
            pair.loop.advanceTime(by: .milliseconds(500))
            try pair.pump()
        }
        #expect(pair.dialer.isActive && pair.listenerChannel.isActive)
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError).isEmpty)
    }

    @Test func aSilentPeerIsDeclaredDeadWithinTheDeadline() throws {
        let pair = try EmbeddedPair()
        try pair.activate()
        _ = try EmbeddedPair.events(pair.dialer)
        // The listener's bytes never reach the dialer any more: a cut link.
        var elapsed = 0
        while pair.dialer.isActive && elapsed < 20_000 {
            pair.loop.advanceTime(by: .milliseconds(100))
            elapsed += 100
            while try pair.dialer.readOutbound(as: ByteBuffer.self) != nil {}
        }
        #expect(elapsed <= 9_500, "declared dead after \(elapsed) ms")
        #expect(elapsed >= 9_000)
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError) == [ConnectionError(.peerUnresponsive)])
    }

    /// While the application holds up reading (receive budget), the peer's bytes wait unread, so
    /// its silence proves nothing; the dead-peer clock runs again once reading resumes. Before,
    /// an application stalled for 9 s lost the connection as "unresponsive".
    @Test func aPauseForTheReceiveBudgetIsNotADeadPeer() throws {
        let pair = try EmbeddedPair()
        try pair.activate()
        _ = try EmbeddedPair.events(pair.dialer)
        try pair.dialer.pipeline.triggerUserOutboundEvent(ConnectionCommand.pauseReading).wait()
        for _ in 0..<200 {  // 20 s of virtual time: the listener reads the dialer, not the reverse
            pair.loop.advanceTime(by: .milliseconds(100))
            while let bytes = try pair.dialer.readOutbound(as: ByteBuffer.self) { try pair.listenerChannel.writeInbound(bytes) }
            while try pair.listenerChannel.readOutbound(as: ByteBuffer.self) != nil {}
        }
        // Neither side gave up: the paused one knows the silence is its own, and its PINGs
        // keep the other side's dead-peer clock from running out.
        #expect(pair.dialer.isActive)
        #expect(pair.listenerChannel.isActive)
        try pair.dialer.pipeline.triggerUserOutboundEvent(ConnectionCommand.resumeReading).wait()
        var elapsed = 0
        while pair.dialer.isActive && elapsed < 20_000 {
            pair.loop.advanceTime(by: .milliseconds(100))
            elapsed += 100
            while try pair.dialer.readOutbound(as: ByteBuffer.self) != nil {}
        }
        #expect(elapsed >= 9_000 && elapsed <= 9_500, "declared dead \(elapsed) ms after reading resumed")
        #expect(try EmbeddedPair.events(pair.dialer).compactMap(\.closeError) == [ConnectionError(.peerUnresponsive)])
    }
}

@Suite("ConnectionHandler: frames written between flushes share TLS records")
struct WriteCoalescingTests {
    static func flushed(_ channel: EmbeddedChannel) throws -> [ByteBuffer] {
        var wire: [ByteBuffer] = []
        while let bytes = try channel.readOutbound(as: ByteBuffer.self) { wire.append(bytes) }
        return wire
    }

    /// TLS records in `wire`, by their 5-byte headers (-1 when they do not parse).
    static func recordCount(_ wire: [ByteBuffer]) -> Int { TLSRecords.lengths(in: wire)?.count ?? -1 }

    static func connectedPair() throws -> EmbeddedPair {
        let pki = ConnectionHandlerTests.pki
        let pair = try EmbeddedPair(dialerIdentity: try pki.peer("alice"), listenerIdentity: try pki.peer("bob"))
        try pair.activate()
        #expect(try EmbeddedPair.events(pair.dialer).contains { $0.isEstablished })
        #expect(try EmbeddedPair.events(pair.listenerChannel).contains { $0.isEstablished })
        return pair
    }

    static func messages(_ channel: EmbeddedChannel) throws -> [String] {
        try EmbeddedPair.events(channel).compactMap { event -> String? in
            guard case .frame(.message(let payload, true)) = event else { return nil }
            return String(buffer: payload)
        }
    }

    @Test func aBurstCostsTwoRecordsAndArrivesInOrder() throws {
        let pair = try Self.connectedPair()
        for index in 0..<50 {
            pair.dialer.write(Frame.message(ByteBuffer(repeating: UInt8(index), count: 64), isEnd: true), promise: nil)
        }
        pair.dialer.flush()
        let wire = try Self.flushed(pair.dialer)
        // The first frame is sealed as it is written; the other 49 wait for the flush together.
        #expect(Self.recordCount(wire) == 2)
        for bytes in wire { try pair.listenerChannel.writeInbound(bytes) }
        let payloads = try EmbeddedPair.events(pair.listenerChannel).compactMap { event -> [UInt8]? in
            guard case .frame(.message(let payload, true)) = event else { return nil }
            return Array(payload.readableBytesView)
        }
        #expect(payloads == (0..<50).map { [UInt8](repeating: UInt8($0), count: 64) })
    }

    /// What reaches the channel from the handler, flushed or not: a lone frame goes down at once,
    /// the frames after it only at the flush.
    @Test func aLoneFrameIsSealedAtOnceAndTheNextWaitForTheFlush() throws {
        let pair = try Self.connectedPair()
        let recorder = WriteRecorder()
        try pair.dialer.pipeline.syncOperations.addHandler(recorder, position: .first)
        pair.dialer.write(Frame.message(ByteBuffer(string: "alone"), isEnd: true), promise: nil)
        #expect(recorder.writes == 1)
        pair.dialer.write(Frame.message(ByteBuffer(string: "next"), isEnd: true), promise: nil)
        pair.dialer.write(Frame.message(ByteBuffer(string: "and next"), isEnd: true), promise: nil)
        #expect(recorder.writes == 1)
        pair.dialer.flush()
        #expect(recorder.writes == 2)
        let wire = try Self.flushed(pair.dialer)
        #expect(Self.recordCount(wire) == 2)
        for bytes in wire { try pair.listenerChannel.writeInbound(bytes) }
        #expect(try Self.messages(pair.listenerChannel) == ["alone", "next", "and next"])
    }

    /// A control reply the handler sends on its own (PONG) seals the held frames ahead of it
    /// and takes them out with it, before the application's flush.
    @Test func aReplyTakesHeldFramesOutAheadOfIt() throws {
        let pair = try Self.connectedPair()
        pair.dialer.write(Frame.message(ByteBuffer(string: "one"), isEnd: true), promise: nil)
        pair.dialer.write(Frame.message(ByteBuffer(string: "two"), isEnd: true), promise: nil)
        try pair.listenerChannel.writeOutbound(Frame.ping(7))
        try pair.pump()
        #expect(try Self.messages(pair.listenerChannel) == ["one", "two"])
        pair.dialer.write(Frame.message(ByteBuffer(string: "three"), isEnd: true), promise: nil)
        pair.dialer.flush()
        try pair.pump()
        #expect(try Self.messages(pair.listenerChannel) == ["three"])
    }

    /// Closing says GOODBYE after the frames TLS held, not ahead of them.
    @Test func closingSendsHeldFramesAheadOfGoodbye() throws {
        let pair = try Self.connectedPair()
        pair.dialer.write(Frame.message(ByteBuffer(string: "first"), isEnd: true), promise: nil)
        pair.dialer.write(Frame.message(ByteBuffer(string: "held"), isEnd: true), promise: nil)
        _ = pair.dialer.close()
        try pair.pump()
        let events = try EmbeddedPair.events(pair.listenerChannel)
        let messages = events.compactMap { event -> String? in
            guard case .frame(.message(let payload, true)) = event else { return nil }
            return String(buffer: payload)
        }
        #expect(messages == ["first", "held"])
        #expect(events.contains { $0.closeError?.code == .peerSaidGoodbye })
    }

    /// One read that delivers a frame and asks for a reply: the reply was sealed while reading,
    /// before whatever the frame's receiver writes at once, so it must also go out first, or the
    /// peer meets a TLS record out of sequence and the connection fails.
    @Test func aReplySealedWhileReadingGoesOutBeforeWhatTheReceiverWritesAtOnce() throws {
        let pair = try Self.connectedPair()
        try pair.dialer.pipeline.syncOperations.addHandler(ImmediateAnswer())
        pair.listenerChannel.write(Frame.message(ByteBuffer(string: "trigger"), isEnd: true), promise: nil)
        pair.listenerChannel.write(Frame.ping(9), promise: nil)
        pair.listenerChannel.flush()
        // Both records in one read, so one pass of the dialer's state machine meets both.
        var joined = ByteBuffer()
        for var bytes in try Self.flushed(pair.listenerChannel) { joined.writeBuffer(&bytes) }
        try pair.dialer.writeInbound(joined)
        try pair.pump()
        let events = try EmbeddedPair.events(pair.listenerChannel)
        #expect(!events.contains { $0.closeError != nil }, "\(events)")
        #expect(events.contains {
            if case .frame(.message(let payload, true)) = $0 { return String(buffer: payload) == "answer" }
            return false
        })
        #expect(pair.listenerChannel.isActive && pair.dialer.isActive)
    }
}

/// Counts the writes that reach the channel from the handlers above it.
final class WriteRecorder: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    private(set) var writes = 0

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writes += 1
        context.write(data, promise: promise)
    }
}

/// Answers a MESSAGE "trigger…" with "answer…" from inside channelRead, at once, as the session
/// engine answers some frames (a window update pumps queued data) while the handler is still
/// performing. `written` hears each answer as it is written.
final class ImmediateAnswer: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    typealias InboundOut = ConnectionEvent
    typealias OutboundOut = Frame
    private let written: (String) -> Void

    init(written: @escaping (String) -> Void = { _ in }) { self.written = written }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .frame(.message(let payload, true)) = unwrapInboundIn(data), let text = payload.getString(at: payload.readerIndex, length: payload.readableBytes),
            text.hasPrefix("trigger")
        {
            let answer = "answer" + text.dropFirst("trigger".count)
            written(answer)
            context.writeAndFlush(wrapOutboundOut(.message(ByteBuffer(string: answer), isEnd: true)), promise: nil)
        }
        context.fireChannelRead(data)
    }
}
