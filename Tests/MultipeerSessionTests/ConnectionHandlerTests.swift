import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

/// Two EmbeddedChannels back to back, each with a ConnectionHandler: complete handshakes in memory.
final class EmbeddedPair {
    let loop = EmbeddedEventLoop()
    let dialer: EmbeddedChannel
    let listenerChannel: EmbeddedChannel

    init(
        dialerTrust: ConnectionHandler.TrustEvaluator? = nil, listenerTrust: ConnectionHandler.TrustEvaluator? = nil,
        dialerIdentity: SecurityIdentity? = nil, listenerIdentity: SecurityIdentity? = nil
    ) throws {
        dialer = EmbeddedChannel(loop: loop)
        listenerChannel = EmbeddedChannel(loop: loop)
        try dialer.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: TLSContext(identity: dialerIdentity)),
            trustEvaluator: dialerTrust, trustTimeout: .seconds(5)))
        try listenerChannel.pipeline.syncOperations.addHandler(ConnectionHandler(
            configuration: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: TLSContext(identity: listenerIdentity)),
            trustEvaluator: listenerTrust, trustTimeout: .seconds(5)))
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
