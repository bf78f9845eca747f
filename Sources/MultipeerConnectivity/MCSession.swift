import Dispatch
import Foundation
import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import NIOFoundationCompat
import NIOPosix
import Synchronization
import MultipeerProtocol

/// A session of up to 8 peers, Apple's API over TLS 1.3 connections (docs/PROTOCOL.md).
///
/// After `disconnect()` the session can connect again: new connection data starts a new listener.
open class MCSession: NSObject, @unchecked Sendable {
    // @unchecked: immutable after init except the delegate and the subscriber lists, which are
    // behind locks; all connection state lives in the engine on its event loop.

    public let myPeerID: MCPeerID
    /// Apple's `[SecIdentity, SecCertificate...]`, exactly as given.
    public let securityIdentity: [Any]?
    public let encryptionPreference: MCEncryptionPreference
    public let configuration: MCSessionConfiguration

    /// The session's network thread as a task executor. A task that prefers it takes events and
    /// sends without any thread hop, the lowest latency the library offers:
    ///
    ///     Task(executorPreference: session.taskExecutor) {
    ///         for await event in session.events() { /* handle, send */ }
    ///     }
    ///
    /// Code on it must never block: it would stall every connection on that thread, which other
    /// sessions may share.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    public var taskExecutor: any TaskExecutor { networkTaskExecutor as! EventLoopTaskExecutor }

    /// The same thread as a serial executor, for an actor that should live on it
    /// (`nonisolated var unownedExecutor: UnownedSerialExecutor { session.executor.asUnownedSerialExecutor() }`).
    /// Combine it with `taskExecutor` as the task's preference, or each event still takes a detour
    /// through the global executor.
    public let executor: any SerialExecutor

    /// Kept for the session's lifetime: executors are referenced unowned by what runs on them.
    let networkTaskExecutor: AnyObject

    let delegateBox = DelegateBox()
    let delegateQueue: DispatchQueue
    let setupError: MCError?
    let engine: SessionEngine?
    /// Peer objects for peers the app named (kept) and for peers the engine reports as connecting
    /// or connected (dropped when they go notConnected): bounded by the app and the member limit.
    private let knownPeers = Mutex<(named: [Bytes16: MCPeerID], active: [Bytes16: MCPeerID])>(([:], [:]))
    /// Streams made by `events()`; an array so that each event takes a snapshot without allocating.
    let subscribers: EventSubscribers
    private let evaluator = Mutex<CertificateEvaluator?>(nil)
    private let trustEvaluator = Mutex<(@Sendable (MCTrustRequest) async -> Bool)?>(nil)
    /// The pairing code of each peer's latest connection (docs/PROTOCOL.md §7.3), one per peer.
    private let pairingCodes = Mutex<[Bytes16: String]>([:])
    /// Peers we invited and already reported `connecting` for: the dial after an acceptance
    /// must not report it twice.
    private let invitingPeers = Mutex<Set<Bytes16>>([])

    public typealias CertificateEvaluator = @Sendable (_ peer: MCPeerID, _ certificates: [SecCertificate]?) async -> Bool

    open weak var delegate: (any MCSessionDelegate)? {
        get { delegateBox.value }
        set { delegateBox.value = newValue }
    }

    /// Same as `init(peer:securityIdentity:nil, encryptionPreference: .optional)`.
    public convenience init(peer myPeerID: MCPeerID) {
        self.init(peer: myPeerID, securityIdentity: nil, encryptionPreference: .optional)
    }

    /// Apple's initializer with the settings Apple fixes silently.
    public convenience init(
        peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference,
        configuration: MCSessionConfiguration
    ) {
        let settingsTicket = InitializerSettings.leave(configuration, for: myPeerID)
        self.init(peer: myPeerID, securityIdentity: identity, encryptionPreference: encryptionPreference)
        InitializerSettings.discard(settingsTicket)
    }

    /// The typed initializer: the identity directly, errors thrown.
    public convenience init(
        peer myPeerID: MCPeerID, identity: SecurityIdentity?, encryptionPreference: MCEncryptionPreference = .required,
        configuration: MCSessionConfiguration = MCSessionConfiguration()
    ) throws(MCError) {
        let array: [Any]? = identity.map { [SecIdentity($0)] }
        self.init(peer: myPeerID, securityIdentity: array, encryptionPreference: encryptionPreference, configuration: configuration)
        if let setupError { throw setupError }
    }

    /// Apple's initializer, the designated one (a subclass overrides it and keeps the others).
    /// A malformed `identity` array does not trap: the session is created unusable, and every
    /// attempt to connect fails with `MCError.invalidParameter`. Use
    /// `init(peer:identity:encryptionPreference:configuration:)` to get the error at once.
    public init(peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
        let peer = myPeerID
        let securityIdentityArray = identity
        let configuration = InitializerSettings.take(MCSessionConfiguration.self, for: myPeerID) ?? MCSessionConfiguration()
        self.myPeerID = peer
        securityIdentity = securityIdentityArray
        self.encryptionPreference = encryptionPreference
        self.configuration = configuration
        delegateQueue = DispatchQueue(label: "MCSession.delegate.\(peer.displayName)")
        let eventLoop = configuration.eventLoop ?? MultiThreadedEventLoopGroup.singleton.next()
        executor = (eventLoop as? any SerialExecutor) ?? eventLoop.executor
        networkTaskExecutor = EventLoopTaskExecutor(eventLoop)
        var engine: SessionEngine?
        var setupError: MCError?
        let events = EventSink()
        let subscribers = EventSubscribers()
        self.subscribers = subscribers
        do throws(MCError) {
            let identity = try SecurityIdentityArray.parse(securityIdentityArray)
            let tls: TLSContext
            do {
                tls = try TLSContext.shared(identity: identity)
            } catch {
                throw MCError(.invalidParameter, reason: error.description)
            }
            engine = SessionEngine(
                configuration: SessionEngineConfiguration(
                    localPeer: peer.wire, encryptionPreference: encryptionPreference.wire, tls: tls,
                    listenHost: configuration.listenAddress, advertisedAddresses: configuration.advertisedAddresses,
                    trustTimeout: TimeAmount(configuration.certificateDecisionTimeout),
                    handshakeTimeout: TimeAmount(configuration.handshakeTimeout),
                    keepalive: KeepalivePolicy(
                        interval: TimeAmount(configuration.keepaliveInterval),
                        deadPeerDeadline: TimeAmount(configuration.deadPeerDeadline)),
                    recordsPerKeyUpdate: max(configuration.tlsRecordsPerKeyUpdate, 1),
                    maximumDatagramMessage: configuration.maximumDatagramSize,
                    datagramLimits: Self.datagramLimits(configuration),
                    maximumPendingConnections: configuration.maximumPendingConnections,
                    maximumQueuedBytesPerPeer: configuration.maximumQueuedBytesPerPeer,
                    maximumUndeliveredBytesPerPeer: configuration.maximumUndeliveredBytesPerPeer,
                    channels: ChannelConfiguration(
                        streamBufferLimit: configuration.streamBufferSize,
                        resourceDirectory: configuration.resourceDirectory?.path,
                        maximumIncomingResourceSize: configuration.maximumIncomingResourceSize,
                        maximumConcurrentIncomingResources: configuration.maximumConcurrentIncomingResources,
                        resumableTransfers: configuration.resumableTransfers,
                        resumeLifetime: TimeAmount(configuration.resumeLifetime)),
                    recovery: RecoveryPolicy(grace: TimeAmount(max(configuration.linkRecoveryGrace, .zero))),
                    logger: configuration.logger),
                eventLoop: eventLoop,
                fileIOPool: configuration.fileIOPool ?? .singleton,
                onEvent: { event in events.session?.handle(event) },
                onReadPassEnded: { subscribers.readPassEnded() })
        } catch {
            setupError = error
        }
        self.engine = engine
        self.setupError = setupError
        super.init()
        events.session = self
        if let engine { DiscoveryNews.subscribe(engine) }
        // Streams and resources are refused while nobody would take them.
        engine?.setChannelAcceptance { [weak self] in
            guard let self else { return false }
            return self.delegateBox.value != nil || self.subscribers.takeChannels
        }
    }

    deinit {
        // A session dropped without disconnect() still says goodbye and frees its sockets, and
        // the partial files it kept for resuming go with it; so do those of transfers the
        // disconnect cuts off later on the loop, as the discard closes the store.
        if let engine { DiscoveryNews.unsubscribe(engine) }
        _ = engine?.disconnect()
        engine?.discardResumableTransfers()
        // Loops over `events()` end with the session, as they did with AsyncStream continuations.
        for channel in subscribers.all { channel.finish() }
    }

    /// The peers currently connected, in a stable order.
    open var connectedPeers: [MCPeerID] {
        (engine?.connectedPeers ?? []).map { mcPeer($0) }
    }

    // MARK: Connecting

    /// Makes the blob that `peerID` passes to `connectPeer(_:withNearbyConnectionData:)` to reach this session.
    open func nearbyConnectionData(forPeer peerID: MCPeerID, withCompletionHandler completionHandler: @escaping @Sendable (Data?, (any Error)?) -> Void) {
        guard let engine else {
            completionHandler(nil, setupError)
            return
        }
        remember(peerID)
        engine.connectionData(forPeer: peerID.wire.identifier).whenComplete { result in
            switch result {
            case .success(let data):
                var buffer = ByteBuffer()
                data.encode(into: &buffer)
                completionHandler(Data(buffer.readableBytesView), nil)
            case .failure(let error):
                completionHandler(nil, MCError(.unavailable, reason: "cannot listen: \(error)"))
            }
        }
    }

    /// The same, for async code: the form Apple's SDK generates from the completion handler.
    public func nearbyConnectionData(forPeer peerID: MCPeerID) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            nearbyConnectionData(forPeer: peerID) { data, error in
                if let data { continuation.resume(returning: data) } else { continuation.resume(throwing: error ?? MCError(.unknown)) }
            }
        }
    }

    /// Apple's shape: never throws. Bad connection data is reported to the delegate as the peer
    /// going notConnected; call `connect(to:nearbyConnectionData:)` to get the error instead.
    open func connectPeer(_ peerID: MCPeerID, withNearbyConnectionData data: Data) {
        do {
            try connect(to: peerID, nearbyConnectionData: data)
        } catch {
            emit(.peerStateChanged(peerID, .notConnected))
        }
    }

    /// Checks the connection data and dials the peer that made it.
    /// Throws `invalidParameter` for garbage, truncated data, or data made by or for another peer.
    public func connect(to peerID: MCPeerID, nearbyConnectionData data: Data) throws(MCError) {
        guard let engine else { throw setupError ?? MCError(.unknown) }
        guard data.count <= WireLimits.maxConnectionDataLength else {
            throw MCError(.invalidParameter, reason: "connection data of \(data.count) bytes is too long")
        }
        let decoded: ConnectionData
        do {
            decoded = try ConnectionData.decode(ByteBuffer(bytes: data))
        } catch {
            throw MCError(.invalidParameter, reason: "connection data: \(error.rule)")
        }
        guard decoded.peerID.identifier == peerID.wire.identifier else {
            throw MCError(.invalidParameter, reason: "the connection data was made by another peer than \(peerID.displayName)")
        }
        guard decoded.forPeer == myPeerID.wire.identifier else {
            throw MCError(.invalidParameter, reason: "the connection data was made for another peer")
        }
        remember(peerID)
        engine.connect(to: decoded)
    }

    open func cancelConnectPeer(_ peerID: MCPeerID) {
        engine?.cancelConnect(peer: peerID.wire.identifier)
    }

    /// Says goodbye to every peer and reports each as notConnected. The session stays usable.
    open func disconnect() {
        _ = engine?.disconnect()
    }

    /// The same, returning once every connection is closed. Not an async overload of
    /// `disconnect()`: in async code Swift would pick that one, and Apple's plain
    /// `session.disconnect()` would no longer compile without `await`.
    public func disconnectAndWait() async {
        try? await engine?.disconnect().get()
    }

    // MARK: Sending

    /// Queues `data` for each peer and returns at once. Throws `notConnected` for an unconnected
    /// peer, `invalidParameter` for an empty peer list or a message over 16 MiB, and then sends
    /// nothing.
    ///
    /// Unreliable messages up to `configuration.maximumDatagramSize` (8 KiB by default) are single
    /// sealed UDP datagrams: they may be lost or reordered, never duplicated, and are dropped when
    /// they cannot be sent at once. Apple sets no size limit on unreliable messages, so larger
    /// ones are not refused: they go over the peer's connection like reliable ones, and are
    /// dropped, without an error, for a peer whose send queue is full.
    open func send(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws {
        try sendChecked(data, toPeers: peerIDs, with: mode)
    }

    /// The same, with the error type spelled out.
    public func sendChecked(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws(MCError) {
        guard let engine else { throw setupError ?? MCError(.unknown) }
        do {
            let message = ByteBuffer(bytes: data)
            let peers = peerIDs.map(\.wire.identifier)
            switch mode {
            case .reliable: try engine.send(message, to: peers)
            case .unreliable where message.readableBytes > engine.configuration.maximumDatagramMessage:
                try Self.sendOverConnections(message, to: peers, on: engine)
            case .unreliable: try engine.sendUnreliable(message, to: peers)
            }
        } catch {
            let names = peerIDs.filter { error.peers.contains($0.wire.identifier) }.map(\.displayName).joined(separator: ", ")
            switch error.code {
            case .noPeers: throw MCError(.invalidParameter, reason: "no peers given")
            case .messageTooLarge:
                throw MCError(.invalidParameter, reason: "\(mode) message of \(error.messageSize ?? 0) bytes, at most \(WireLimits.maxMessageSize)")
            case .notConnected:
                throw MCError(.notConnected, reason: "not connected to \(names)")
            case .datagramsUnsupported:
                throw MCError(.unsupported, reason: "\(names) announced no datagram port: unreliable messages cannot reach it")
            case .queueFull:
                throw MCError(
                    .unavailable,
                    reason: "the send queue to \(names) is full (\(engine.configuration.maximumQueuedBytesPerPeer) bytes): "
                        + "retry once it drains, or use the async send, which waits")
            default:
                throw MCError(.unknown, reason: error.description)
            }
        }
    }

    /// An unreliable message too large for one datagram, over each peer's connection. Still
    /// unreliable as Apple's are: a peer whose send queue is full does not get it, and nobody is
    /// told. Any other refusal (an unconnected peer, a message over 16 MiB) sends nothing.
    private static func sendOverConnections(_ message: ByteBuffer, to peers: [Bytes16], on engine: SessionEngine) throws(SessionSendError) {
        var remaining = peers
        while true {
            do {
                return try engine.send(message, to: remaining)
            } catch {
                guard error.code == .queueFull else { throw error }
                let before = remaining.count
                remaining.removeAll { error.peers.contains($0) }
                // Nobody left, or a refusal that named nobody: drop it.
                if remaining.isEmpty || remaining.count == before { return }
            }
        }
    }

    // MARK: Events from the engine

    private func handle(_ event: SessionEngineEvent) {
        switch event {
        case .peerStateChanged(let wire, let state):
            let mapped: MCSessionState = switch state {
            case .connecting: .connecting
            case .connected: .connected
            case .notConnected: .notConnected
            }
            let peer = mcPeer(wire)
            let alreadyReported = invitingPeers.withLock { inviting in
                defer { if mapped != .connecting { inviting.remove(wire.identifier) } }
                return mapped == .connecting && inviting.contains(wire.identifier)
            }
            if !alreadyReported { emit(.peerStateChanged(peer, mapped)) }
            if case .notConnected(let error) = state {
                if let error, let failure = MCError(connectionError: error) { emit(.connectionFailed(peer, failure)) }
                forgetUnlessAppNamed(wire.identifier)
            }
        case .peerRefused(let wire, let reason):
            // Refused strangers are not remembered: they would grow the table without bound.
            emit(.connectionRefused(mcPeer(wire, remember: false), MCError(refusal: reason)))
        case .messageReceived(let buffer, let wire, let receipt):
            // Large messages are handed over without a copy; small ones copied, so they do not pin
            // a larger receive buffer.
            let data = buffer.getData(at: buffer.readerIndex, length: buffer.readableBytes) ?? Data()
            // Synchronous inside the engine's read: its read-complete hook follows on this thread.
            emit(.dataReceived(data, from: mcPeer(wire)), receipt: receipt, duringRead: true)
        case .trustRequested(let request, let answer):
            askTrust(request, answer: answer)
        case .streamOpened(let reader):
            streamOpened(reader)
        case .resourceStarted(let transfer):
            resourceStarted(transfer)
        case .resourceFinished(let transfer, let result):
            resourceFinished(transfer, result)
        case .linkInterrupted(let wire):
            emit(.linkInterrupted(mcPeer(wire)))
        case .linkRestored(let wire):
            emit(.linkRestored(mcPeer(wire)))
        }
    }

    private func askTrust(_ request: PeerTrustRequest, answer: @escaping @Sendable (Bool) -> Void) {
        let peer = mcPeer(request.peer)
        let certificates = request.certificateChain?.map(SecCertificate.init)
        pairingCodes.withLock { $0[request.peer.identifier] = request.pairingCode }
        let decide: @Sendable (Bool) -> Void = { [weak self] accepted in
            // The decision is in the event stream before the answer can make the peer connected.
            self?.emit(.certificateDecided(peer, certificates: certificates, accepted: accepted))
            answer(accepted)
        }
        // Async evaluators start on the network thread, where the request was made and the answer
        // goes: one that does not suspend costs no thread hop (two each way through the global
        // executor otherwise).
        if let evaluator = trustEvaluator.withLock({ $0 }) {
            let trustRequest = MCTrustRequest(
                peer: peer, certificates: certificates, pairingCode: request.pairingCode, isEncrypted: request.isEncrypted)
            Task(executorPreference: taskExecutor) { decide(await evaluator(trustRequest)) }
            return
        }
        if let evaluator = evaluator.withLock({ $0 }) {
            Task(executorPreference: taskExecutor) { decide(await evaluator(peer, certificates)) }
            return
        }
        delegateQueue.async { [delegateBox, weak self] in
            guard let self, let delegate = delegateBox.value else {
                decide(true)  // no delegate: Apple's default
                return
            }
            delegate.session(self, didReceiveCertificate: certificates, fromPeer: peer) { accepted in decide(accepted) }
        }
    }

    /// Hands `event` to every `events()` stream and the delegate. A message's receipt is consumed
    /// once each of them has taken it, which is what lets its peer's connection read on.
    /// `duringRead`: the engine delivers the event while it reads, on its network thread, and
    /// reports the read's end (`readPassEnded`), so an `events()` consumer is woken once for the
    /// first of the read's messages and once for the rest.
    func emit(_ event: Event, receipt: DeliveryReceipt = .none, duringRead: Bool = false) {
        let channels = subscribers.all
        let hasDelegate = delegateBox.value != nil
        let consumers = channels.count + (hasDelegate ? 1 : 0)
        guard consumers > 0 else { return receipt.consumed() }
        let share = receipt.shared(among: consumers)
        subscribers.yield(event, to: channels, receipt: share, duringRead: duringRead)
        // No delegate, no hop to its queue (async-API apps would pay for it on every message).
        guard hasDelegate else { return }
        delegateQueue.async { [delegateBox, weak self] in
            defer { share.consumed() }
            guard let self, let delegate = delegateBox.value else { return }
            switch event {
            case .peerStateChanged(let peer, let state): delegate.session(self, peer: peer, didChange: state)
            case .dataReceived(let data, let peer): delegate.session(self, didReceive: data, fromPeer: peer)
            case .certificateDecided, .connectionFailed, .connectionRefused, .streamReceived, .resourceStarted, .resourceReceived,
                .linkInterrupted, .linkRestored:
                // Apple's delegate has no such calls (the state change already went out), or it
                // gets them its own way (streams and resources, MCSession+Channels.swift).
                break
            }
        }
    }

    // MARK: Peers

    /// An invitation went out: Apple's session reports the peer connecting at once.
    func beginInvitation(_ peer: MCPeerID) {
        invitingPeers.withLock { _ = $0.insert(peer.wire.identifier) }
        emit(.peerStateChanged(peer, .connecting))
    }

    /// The invitation ended without a connection.
    func endInvitation(_ peer: MCPeerID, failed error: MCError) {
        guard invitingPeers.withLock({ $0.remove(peer.wire.identifier) }) != nil else { return }
        emit(.peerStateChanged(peer, .notConnected))
        emit(.connectionFailed(peer, error))
    }

    func remember(_ peer: MCPeerID) {
        knownPeers.withLock { known in
            let identifier = peer.wire.identifier
            known.named[identifier] = known.named[identifier] ?? known.active[identifier] ?? peer
        }
    }

    private func forgetUnlessAppNamed(_ identifier: Bytes16) {
        knownPeers.withLock { _ = $0.active.removeValue(forKey: identifier) }
    }

    /// Peer objects held for peers the app did not name (for tests of the bound).
    var activePeerObjectCount: Int { knownPeers.withLock { $0.active.count } }

    /// The app's own MCPeerID object for a peer when it has one, so identity checks with === also hold.
    func mcPeer(_ wire: WirePeerID, remember: Bool = true) -> MCPeerID {
        knownPeers.withLock { known in
            if let peer = known.named[wire.identifier] ?? known.active[wire.identifier] { return peer }
            let peer = MCPeerID(wire: wire)
            if remember { known.active[wire.identifier] = peer }
            return peer
        }
    }
}

// MARK: Swift-native API

extension MCSession {
    /// What happens in a session, for `for await` loops.
    public enum Event: Sendable {
        case peerStateChanged(MCPeerID, MCSessionState)
        case dataReceived(Data, from: MCPeerID)
        /// A peer's certificates (nil: no identity) and the decision made on them.
        case certificateDecided(MCPeerID, certificates: [SecCertificate]?, accepted: Bool)
        /// Why a peer went notConnected, when it was not a normal goodbye.
        case connectionFailed(MCPeerID, MCError)
        /// A peer tried to connect and was turned away before anyone was asked (session full,
        /// stale connection data).
        case connectionRefused(MCPeerID, MCError)
        /// A peer opened a stream. Delivered here only when the session has no delegate (which
        /// would get it as an `InputStream`); read it from one task, or cancel it.
        case streamReceived(MCStreamReader, from: MCPeerID)
        /// A peer's resource is arriving; watch or cancel it through the progress. It changes on
        /// the session's network thread: read it from a task preferring `taskExecutor` (Linux
        /// Foundation's `Progress` takes no lock).
        case resourceStarted(name: String, from: MCPeerID, progress: Progress)
        /// A resource arrived and was verified (SHA-256), or failed. Without a delegate the file
        /// is yours: move it or remove it. With a delegate it is removed after
        /// `didFinishReceivingResourceWithName` returns, as Apple's is.
        case resourceReceived(name: String, from: MCPeerID, result: Result<URL, MCError>)
        /// A connected peer's link was lost without a goodbye and the session is reconnecting it
        /// (docs/PROTOCOL.md §7.9): the peer stays connected, and reliable messages sent to it
        /// meanwhile are delivered once it is back, once and in order. Next comes `linkRestored`,
        /// or `peerStateChanged(.notConnected)` once `MCSessionConfiguration.linkRecoveryGrace` has
        /// passed. For a "reconnecting" indicator; Apple's delegate has no such call.
        case linkInterrupted(MCPeerID)
        /// The peer's link is back after `linkInterrupted`.
        case linkRestored(MCPeerID)
    }

    /// A new stream of this session's events from now on; each call gets its own.
    public func events() -> Events { events(takingChannels: true) }

    /// `takingChannels: false` for the library's own watchers: their subscription does not make
    /// the session accept streams and resources that nobody would take.
    func events(takingChannels: Bool) -> Events {
        let channel = EventChannel(takesChannels: takingChannels) { [weak self] finished in
            self?.subscribers.remove(finished)
        }
        subscribers.add(channel)
        return Events(subscription: EventSubscription(channel: channel))
    }

    /// Reliable bytes queued to `peer` and not yet handed to its connection (to a peer that can
    /// recover a lost link, not yet acknowledged: docs/PROTOCOL.md §7.9), each message counted
    /// with 64 bytes more: what a sender can watch to pace itself (at most
    /// `MCSessionConfiguration.maximumQueuedBytesPerPeer`).
    public func queuedByteCount(to peer: MCPeerID) -> Int {
        engine?.queuedBytes(to: peer.wire.identifier) ?? 0
    }

    /// Streams currently subscribed (for tests).
    var subscriberCount: Int { subscribers.all.count }

    /// Decides on peers' certificates in async code; takes precedence over the delegate's method.
    /// It runs on the session's network thread (as a task preferring `taskExecutor`), after each
    /// `await` too: it must not block, or every connection on that thread, and the trust
    /// timeout, wait with it. Long synchronous work belongs in a task of its own
    /// (`Task.detached { … }.value`).
    public func setCertificateEvaluator(_ evaluator: CertificateEvaluator?) {
        self.evaluator.withLock { $0 = evaluator }
    }

    /// Decides on peers with everything there is to know, the pairing code included; takes
    /// precedence over `setCertificateEvaluator` and the delegate. Like that one, it runs on the
    /// session's network thread and must not block.
    public func setTrustEvaluator(_ evaluator: (@Sendable (MCTrustRequest) async -> Bool)?) {
        trustEvaluator.withLock { $0 = evaluator }
    }

    private static func datagramLimits(_ configuration: MCSessionConfiguration) -> DatagramPeerState.Limits {
        var limits = DatagramPeerState.Limits()
        limits.epochCounterLimit = min(max(configuration.datagramsPerEpoch, 1), WireLimits.datagramEpochCounterLimit)
        return limits
    }

    /// The pairing code of the connection to `peer` (docs/PROTOCOL.md §7.3): 6 digits that both
    /// people compare before they accept; they differ when someone sits in between. Available
    /// from the moment the certificate handler is asked (call it from there), kept while connected.
    public func pairingCode(with peer: MCPeerID) -> String? {
        pairingCodes.withLock { $0[peer.wire.identifier] }
    }

    /// Sends; returns once the message is queued. A reliable send waits while a peer's send queue
    /// is full (`MCSessionConfiguration.maximumQueuedBytesPerPeer`), so a fast sender keeps pace with
    /// a slow receiver and memory stays bounded on both sides.
    public func send(_ data: Data, to peers: [MCPeerID], mode: MCSessionSendDataMode = .reliable) async throws(MCError) {
        if mode == .reliable, let engine { await engine.paceOnNetworkThread(to: peers.map(\.wire.identifier)) }
        while true {
            do {
                return try sendChecked(data, toPeers: peers, with: mode)
            } catch where error.code == .unavailable && mode == .reliable {
                guard let engine else { throw error }
                await engine.waitForSendRoom(data.count, to: peers.map(\.wire.identifier))
                if Task.isCancelled { throw MCError(.cancelled, reason: "the send was cancelled while it waited for room") }
            }
        }
    }
}

/// Holds the weak delegate behind a lock.
final class DelegateBox: @unchecked Sendable {
    private let lock = NSLock()
    private weak var delegate: (any MCSessionDelegate)?
    var value: (any MCSessionDelegate)? {
        get { lock.withLock { delegate } }
        set { lock.withLock { delegate = newValue } }
    }
}

/// Lets the engine's event closure reach the session once it exists, without a retain cycle.
private final class EventSink: @unchecked Sendable {
    private let lock = NSLock()
    private weak var target: MCSession?
    var session: MCSession? {
        get { lock.withLock { target } }
        set { lock.withLock { target = newValue } }
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        // Saturates: an app's "never" (a Duration of centuries) must not trap.
        let (seconds, attoseconds) = duration.components
        let (whole, overflowed) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflowedAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        self = .nanoseconds(overflowed || overflowedAgain ? (seconds < 0 ? .min : .max) : total)
    }
}
