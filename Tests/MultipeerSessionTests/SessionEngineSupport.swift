import Foundation
import Logging
import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol
import ProtocolTestSupport

/// One engine on loopback with everything it reported.
final class EngineProbe: Sendable {
    let engine: SessionEngine
    let peer: WirePeerID
    private let log = Mutex<(states: [(Bytes16, PeerConnectionState)], messages: [(Bytes16, ByteBuffer)], refusals: [(Bytes16, GoodbyeReason)])>(([], [], []))
    private let trustPolicy = Mutex<@Sendable (PeerTrustRequest) -> Bool>({ _ in true })
    /// While holding, delivered messages stay untaken (a stalled application), so their bytes
    /// count against the sender's receive budget.
    private let held = Mutex<(holding: Bool, receipts: [DeliveryReceipt])>((false, []))
    /// For each read end the engine reported, how many messages it had delivered by then.
    private let readEnds = Mutex<[Int]>([])
    /// Link recovery's reports: false when a peer's link was lost, true when it was restored.
    private let linkLog = Mutex<[(Bytes16, Bool)]>([])

    func linkEvents(of other: EngineProbe) -> [Bool] { linkEvents(ofPeer: other.peer.identifier) }

    func linkEvents(ofPeer peer: Bytes16) -> [Bool] { linkLog.withLock { $0.filter { $0.0 == peer }.map(\.1) } }

    /// Streams and resources the peers opened to us, in order.
    private let channelLog = Mutex<(streams: [ByteStreamReader], started: [ResourceTransfer], offsets: [UInt64], finished: [(ResourceTransfer, Result<String, TransferError>)])>(([], [], [], []))

    init(
        name: String, preference: WireEncryptionPreference = .required, identity: SecurityIdentity? = nil,
        keepalive: KeepalivePolicy = KeepalivePolicy(),
        channels: ChannelConfiguration = ChannelConfiguration(),
        segmentationOffload: Bool = true,
        maximumUndeliveredBytes: Int = 8 << 20,
        maximumQueuedBytes: Int = 32 << 20,
        recovery: RecoveryPolicy = RecoveryPolicy(),
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next()
    ) throws {
        let peer = try WirePeerID(identifier: .random(), displayName: name)
        self.peer = peer
        let box = Mutex<EngineProbe?>(nil)
        engine = SessionEngine(
            configuration: SessionEngineConfiguration(
                localPeer: peer, encryptionPreference: preference, tls: try TLSContext(identity: identity),
                listenHost: "127.0.0.1", keepalive: keepalive, maximumQueuedBytesPerPeer: maximumQueuedBytes,
                maximumUndeliveredBytesPerPeer: maximumUndeliveredBytes,
                channels: channels, datagramSegmentationOffload: segmentationOffload, recovery: recovery, logger: Self.logger(name)),
            eventLoop: eventLoop,
            onEvent: { event in box.withLock { $0 }?.record(event) },
            onReadPassEnded: { box.withLock { $0 }?.recordReadEnd() })
        box.withLock { $0 = self }
    }

    /// MULTIPEER_TEST_LOG=1 prints the engines' notices (why a connection ended) to standard error.
    static func logger(_ name: String) -> Logger {
        guard ProcessInfo.processInfo.environment["MULTIPEER_TEST_LOG"] != nil else {
            return Logger(label: name, factory: { _ in SwiftLogNoOpLogHandler() })
        }
        var logger = Logger(label: name, factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .info
        return logger
    }

    func trust(_ policy: @escaping @Sendable (PeerTrustRequest) -> Bool) { trustPolicy.withLock { $0 = policy } }

    /// Stops taking messages (`true`) or takes everything held and goes on taking (`false`).
    func holdMessages(_ holding: Bool) {
        let release = held.withLock { held in
            held.holding = holding
            defer { if !holding { held.receipts = [] } }
            return holding ? [] : held.receipts
        }
        for receipt in release { receipt.consumed() }
    }

    /// Bytes delivered and not yet taken.
    var heldBytes: Int { held.withLock { $0.receipts.reduce(0) { $0 + $1.bytes } } }

    private func recordReadEnd() {
        let delivered = log.withLock { $0.messages.count }
        readEnds.withLock { $0.append(delivered) }
    }

    /// Messages delivered by each read end the engine reported, in order.
    var messagesAtReadEnds: [Int] { readEnds.withLock { $0 } }

    /// Peer states and finished resources, in the order reported.
    private let order = Mutex<[String]>([])
    var eventOrder: [String] { order.withLock { $0 } }

    private func record(_ event: SessionEngineEvent) {
        switch event {
        case .peerStateChanged(_, let state): order.withLock { $0.append("\(state)") }
        case .resourceFinished: order.withLock { $0.append("resourceFinished") }
        default: break
        }
        switch event {
        case .peerStateChanged(let peer, let state): log.withLock { $0.states.append((peer.identifier, state)) }
        case .messageReceived(let message, let peer, let receipt):
            log.withLock { $0.messages.append((peer.identifier, message)) }
            let consumeNow = held.withLock { held in
                guard held.holding else { return true }
                held.receipts.append(receipt)
                return false
            }
            if consumeNow { receipt.consumed() }
        case .trustRequested(let request, let answer): answer(trustPolicy.withLock { $0 }(request))
        case .peerRefused(let peer, let reason): log.withLock { $0.refusals.append((peer.identifier, reason)) }
        case .linkInterrupted(let peer): linkLog.withLock { $0.append((peer.identifier, false)) }
        case .linkRestored(let peer): linkLog.withLock { $0.append((peer.identifier, true)) }
        case .streamOpened(let reader): channelLog.withLock { $0.streams.append(reader) }
        case .resourceStarted(let transfer):
            channelLog.withLock {
                $0.started.append(transfer)
                $0.offsets.append(transfer.completedBytes)
            }
        case .resourceFinished(let transfer, let result): channelLog.withLock { $0.finished.append((transfer, result)) }
        }
    }

    var openedStreams: [ByteStreamReader] { channelLog.withLock { $0.streams } }
    var startedResources: [ResourceTransfer] { channelLog.withLock { $0.started } }
    /// Where each incoming resource started: 0, or the length of a kept prefix it resumed.
    var resumeOffsets: [UInt64] { channelLog.withLock { $0.offsets } }
    var finishedResources: [(ResourceTransfer, Result<String, TransferError>)] { channelLog.withLock { $0.finished } }

    func states(of other: EngineProbe) -> [PeerConnectionState] {
        log.withLock { $0.states.filter { $0.0 == other.peer.identifier }.map(\.1) }
    }

    func messages(from other: EngineProbe) -> [ByteBuffer] {
        log.withLock { $0.messages.filter { $0.0 == other.peer.identifier }.map(\.1) }
    }

    func refusals(of other: EngineProbe) -> [GoodbyeReason] {
        log.withLock { $0.refusals.filter { $0.0 == other.peer.identifier }.map(\.1) }
    }

    func allMessages() -> [(Bytes16, ByteBuffer)] { log.withLock { $0.messages } }

    /// Every peer the engine reported any state for.
    func reportedPeers() -> Set<Bytes16> { log.withLock { Set($0.states.map(\.0)) } }

    /// The most peers that were connected at the same time, from the reported states.
    func maximumConnectedAtOnce() -> Int {
        log.withLock { log in
            var connected = Set<Bytes16>()
            var most = 0
            for (peer, state) in log.states {
                if state == .connected { connected.insert(peer) } else { connected.remove(peer) }
                most = max(most, connected.count)
            }
            return most
        }
    }

    func lastState(ofPeer peer: Bytes16) -> PeerConnectionState? {
        log.withLock { $0.states.last { $0.0 == peer }?.1 }
    }

    func isConnected(to other: EngineProbe) -> Bool { states(of: other).last == .connected }

    func lastState(of other: EngineProbe) -> PeerConnectionState? { states(of: other).last }

    /// `other` dials us with connection data we made for it.
    func accept(_ other: EngineProbe) async throws {
        let data = try await engine.connectionData(forPeer: other.peer.identifier).get()
        other.engine.connect(to: data)
    }

    /// Connects `other` to this probe and waits until each sees the other connected.
    func connect(_ other: EngineProbe) async throws -> Bool {
        try await accept(other)
        return try await eventually { self.isConnected(to: other) && other.isConnected(to: self) }
    }

    func shutdown() async { try? await engine.disconnect().get() }
}


/// A member that joined a probe by connection data and speaks through ConnectionHandler on a raw
/// channel, so a test can write frames of its choosing (or, with the handler removed, bytes).
struct RawMember {
    let peer: WirePeerID
    let channel: any Channel
    let log: EventLog

    struct NotEstablished: Error {}

    static func join(
        _ victim: EngineProbe, name: String, identifier: Bytes16 = .random(), preference: WireEncryptionPreference = .required,
        keepalive: KeepalivePolicy? = KeepalivePolicy(), harness: LoopbackHarness = LoopbackHarness(group: MultiThreadedEventLoopGroup.singleton)
    ) async throws -> RawMember {
        try await join(engine: victim.engine, name: name, identifier: identifier, preference: preference, keepalive: keepalive, harness: harness)
    }

    /// The same for an engine of the test's own (one it can drop: a probe and its engine hold each other).
    static func join(
        engine victim: SessionEngine, name: String, identifier: Bytes16 = .random(), preference: WireEncryptionPreference = .required,
        keepalive: KeepalivePolicy? = KeepalivePolicy(), harness: LoopbackHarness = LoopbackHarness(group: MultiThreadedEventLoopGroup.singleton)
    ) async throws -> RawMember {
        let peer = try WirePeerID(identifier: identifier, displayName: name)
        let data = try await victim.connectionData(forPeer: peer.identifier).get()
        let log = EventLog()
        let configuration = ConnectionConfiguration(
            role: .dialer, localPeer: peer, encryptionPreference: preference, tls: try TLSContext(identity: nil),
            purpose: .connectionData, token: data.token)
        let channel = try await harness.dial(port: Int(data.endpoints[0].port), configuration: configuration, keepalive: keepalive, log: log)
        guard try await log.wait(until: { $0.established != nil }) else { throw NotEstablished() }
        return RawMember(peer: peer, channel: channel, log: log)
    }
}
