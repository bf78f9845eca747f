import Logging
import MultipeerCrypto
import MultipeerWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// The SwiftNIO shell of a session: one TCP listener, one UDP socket and one secure connection
/// per peer, all on one event loop. Every decision is the `SessionCore`'s; this keeps sockets,
/// bootstraps, write batching and the hops onto the loop. The package methods may be called from
/// any thread.
package final class SessionEngine: Sendable {
    package let configuration: SessionEngineConfiguration
    package let eventLoop: any EventLoop
    let state: NIOLoopBoundBox<EngineState>
    let onEvent: @Sendable (SessionEngineEvent) -> Void
    /// A read that delivered messages is over: a consumer need not be woken for each message of
    /// one read, only for the first and, once this runs, for the rest.
    let onReadPassEnded: @Sendable () -> Void
    /// Connected peers and their send queues, readable from any thread, so that `send` can refuse
    /// at once.
    let sendBudget: SendBudget
    private let outgoing = SendQueue<Outgoing>()
    /// Our open channels per peer, readable from any thread, so `openStream` can refuse at once.
    let channelCounts = ChannelCounts()
    /// Incoming resources in progress, from every peer.
    let incomingResources = Atomic<Int>(0)
    let channelAcceptance = NIOLockedValueBox<(@Sendable () -> Bool)?>(nil)
    /// Whether stale partial files in the resource directory have been swept this run.
    let resourceDirectorySwept = Atomic<Bool>(false)
    /// Interrupted incoming transfers, for their senders to resume.
    let resumeStore: Mutex<ResumeStore>
    /// Reads and writes resource files, off the event loop.
    let fileIOPool: NIOThreadPool
    /// Tests make the resource store fail with this (called before each write, with the offset,
    /// and before the final sync, with the length).
    let storageFault = NIOLockedValueBox<(@Sendable (UInt64) throws -> Void)?>(nil)

    private enum Outgoing: Sendable {
        case reliable(ByteBuffer, [Frame], to: [Bytes16])
        case unreliable(ByteBuffer, to: [Bytes16])
    }

    /// Datagrams are flushed once about this many bytes are written, and a segmented write holds at
    /// most this much. Unflushed bytes stay under it plus one batch (at most 32 KiB, or a lone
    /// datagram of at most 64 KiB), below the socket's high-water mark (`datagramWriteMarks`),
    /// so that a burst never makes its own tail look unwritable.
    private static let datagramFlushBytes = 32 * 1024
    private static let datagramWriteMarks = ChannelOptions.Types.WriteBufferWaterMark(low: 64 * 1024, high: 128 * 1024)
    private static let datagramsPerRead = 16
    static let addressWatchInterval = TimeAmount.milliseconds(500)
    private static let receiveSlot = 65_536 - 8

    package init(
        configuration: SessionEngineConfiguration,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(),
        fileIOPool: NIOThreadPool = .singleton,
        onEvent: @escaping @Sendable (SessionEngineEvent) -> Void,
        onReadPassEnded: @escaping @Sendable () -> Void = {}
    ) {
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.fileIOPool = fileIOPool
        self.onEvent = onEvent
        self.onReadPassEnded = onReadPassEnded
        let core = SessionCore(configuration: SessionCoreConfiguration(
            localPeer: configuration.localPeer, handshakeTimeout: configuration.handshakeTimeout,
            // The session's listener takes peers of one host as readily as any other's (tests and
            // several apps on one machine); only the invitation listener limits a source.
            maximumPendingConnections: configuration.maximumPendingConnections,
            maximumPendingConnectionsPerSource: configuration.maximumPendingConnections,
            datagramLimits: configuration.datagramLimits, channelLimits: configuration.channels.muxLimits, logger: configuration.logger,
            // The engine listens before it dials or accepts, so its HELLO never has listenPort 0.
            acceptsConnections: true, recovery: configuration.recovery))
        state = .makeBoxSendingValue(
            EngineState(
                core: core, segmentsDatagrams: configuration.datagramSegmentationOffload && System.supportsUDPSegmentationOffload,
                bytesPerSegmentedWrite: Self.datagramFlushBytes,
                incomingResourcesPerPeer: configuration.channels.maximumIncomingResourcesPerPeer),
            eventLoop: eventLoop)
        sendBudget = SendBudget(limitPerPeer: configuration.maximumQueuedBytesPerPeer)
        resumeStore = Mutex(ResumeStore(capacity: configuration.channels.resumableTransfers, lifetime: configuration.channels.resumeLifetime))
    }

    deinit {
        // Kept partials go with the engine: its expiry timer holds it weakly and would never run.
        removeKept(resumeStore.withLock { $0.close() })
    }

    var core: SessionCore { state.value.core }

    package var connectedPeers: [WirePeerID] {
        sendBudget.peers.sorted { $0.identifier < $1.identifier }
    }

    // MARK: Connection data

    /// Starts listening if needed and returns a blob that `peer` can dial us with, once, for 120 s.
    package func connectionData(forPeer peer: Bytes16) -> EventLoopFuture<ConnectionData> {
        eventLoop.flatSubmit { [self] in
            ensureStarted().flatMapThrowing { port in
                try ConnectionData(
                    encryptionPreference: self.configuration.encryptionPreference,
                    token: self.core.issueToken(forPeer: peer, now: self.eventLoop.now), forPeer: peer,
                    peerID: self.configuration.localPeer,
                    certificateFingerprint: try self.configuration.tls.identity.map {
                        try SHA256Digest(bytes: $0.certificate.sha256Fingerprint)
                    },
                    endpoints: try self.advertisedEndpoints(port: port))
            }
        }
    }

    /// Dials the peer that made `data`. The outcome arrives as peer state events. `linkScope`:
    /// the interface to reach its IPv6 link-local endpoints through, when known.
    package func connect(to data: ConnectionData, linkScope: UInt32? = nil) {
        eventLoop.execute { [self] in
            core.connect(DialPlan(data, linkScope: linkScope))
            perform()
        }
    }

    /// Abandons a connection attempt that has not completed.
    package func cancelConnect(peer: Bytes16) {
        eventLoop.execute { [self] in
            core.cancelConnect(peer: peer)
            perform()
        }
    }

    /// A browser in this process saw `peer`'s host at `addresses`: a member recovering a lost
    /// link is redialed there (`SessionCore.peerDiscovered`).
    package func peerDiscovered(_ peer: Bytes16, at addresses: [SocketAddress]) {
        let seen = addresses.compactMap { try? WireEndpoint(socketAddress: $0).address }
        guard !seen.isEmpty else { return }
        eventLoop.execute { [self] in
            core.peerDiscovered(peer, at: seen, now: eventLoop.now)
            perform()
        }
    }

    // MARK: Messages

    /// Queues a reliable message to each peer; returns at once. Throws for an empty peer list, an
    /// unconnected peer, an oversized message or a full send queue, and then sends nothing.
    package func send(_ message: ByteBuffer, to peers: [Bytes16]) throws(SessionSendError) {
        guard !peers.isEmpty else { throw .noPeers }
        guard message.readableBytes <= WireLimits.maxMessageSize else { throw .messageTooLarge(message.readableBytes) }
        let frames: [Frame]
        do {
            frames = try Frame.messageFragments(of: message)
        } catch {
            throw .messageTooLarge(message.readableBytes)
        }
        do {
            try sendBudget.reserve(DeliveryLedger.charge(of: message), for: peers)
        } catch {
            switch error {
            case .notConnected(let unknown): throw .notConnected(unknown)
            case .full(let full): throw .queueFull(full)
            }
        }
        enqueue(.reliable(message, frames, to: peers))
    }

    /// Returns once each peer's send queue has room for a message of `bytes` (or the peer left).
    package func waitForSendRoom(_ bytes: Int, to peers: [Bytes16]) async {
        await sendBudget.waitForRoom(bytes + DeliveryLedger.entryCharge, for: peers)
    }

    /// For an async sender: on the network thread, waits while much of what was sent to `peers`
    /// is unacknowledged, so that the thread reads the acknowledgements (docs/PROTOCOL.md §7.9);
    /// elsewhere returns at once.
    package func paceOnNetworkThread(to peers: [Bytes16]) async {
        guard eventLoop.inEventLoop else { return }
        await sendBudget.waitForAcknowledgements(for: peers)
    }

    /// What reliable messages to `peer` hold of its send queue: not yet handed to its socket, or,
    /// for a member that keeps them (docs/PROTOCOL.md §7.9), not yet acknowledged; each message
    /// counts `DeliveryLedger.entryCharge` beyond its bytes.
    package func queuedBytes(to peer: Bytes16) -> Int { sendBudget.queuedBytes(to: peer) }

    /// Sends one datagram to each peer; returns at once. Unreliable: a datagram that cannot be
    /// written at once is dropped. Throws like `send` for bad peers or sizes, and then sends nothing.
    package func sendUnreliable(_ message: ByteBuffer, to peers: [Bytes16]) throws(SessionSendError) {
        guard !peers.isEmpty else { throw .noPeers }
        guard message.readableBytes <= configuration.maximumDatagramMessage else { throw .messageTooLarge(message.readableBytes) }
        let refused = sendBudget.datagramRefusals(peers)
        guard refused.notConnected.isEmpty else { throw .notConnected(refused.notConnected) }
        guard refused.withoutDatagrams.isEmpty else { throw .datagramsUnsupported(refused.withoutDatagrams) }
        enqueue(.unreliable(message, to: peers))
    }

    private func enqueue(_ item: Outgoing) {
        let mustSchedule = outgoing.enqueue(item)
        if eventLoop.inEventLoop {
            // Already on the loop (code isolated to the loop's executor): write now, after anything queued.
            drainOutgoing()
        } else if mustSchedule {
            eventLoop.execute { [self] in drainOutgoing() }
        }
    }

    /// Moves everything queued onto the links, in order, and writes what each socket takes. On the loop.
    private func drainOutgoing() {
        let state = state.value
        var touched = TouchedLinks()
        var unflushedDatagramBytes = 0
        var batcher = DatagramBatcher(maximumSegments: state.segmentsPerWrite, maximumBytes: state.bytesPerSegmentedWrite)
        let batch = outgoing.takeAll()
        for item in batch {
            switch item {
            case .reliable(let message, let frames, let peers):
                for peer in peers {
                    // A member that can recover keeps the message until acknowledged, also while
                    // no link carries it (docs/PROTOCOL.md §7.9).
                    let (id, kept) = state.core.sendingReliable(message, to: peer)
                    guard let id, let link = state.links[id] else {
                        // The peer left after send reserved room: give the room back.
                        if !kept { sendBudget.release(DeliveryLedger.charge(of: message), for: peer) }
                        continue
                    }
                    if link.outbound.isEmpty, let socket = link.socket, socket.isWritable {
                        // Nothing waits and the socket takes more: straight to the socket.
                        for frame in frames { link.write(frame, orThrough: socket) }
                        if !link.keepsMessages { link.writtenUnflushed += DeliveryLedger.charge(of: message) }
                        link.hasUnflushedWrites = true  // also for empty messages, which add no bytes
                    } else {
                        link.outbound.append(contentsOf: frames)
                    }
                    touched.insert(link, id: id)
                }
            case .unreliable(let message, let peers):
                guard let udp = state.datagramSocket else { continue }
                for peer in peers {
                    // Unreliable: when the socket cannot take it now, the datagram is dropped.
                    guard udp.isWritable, let (datagram, address) = state.core.sealDatagram(message, to: peer) else { continue }
                    if let closed = batcher.add(datagram, to: address, segmentLimit: state.segmentation.segmentLimit(for: address)) {
                        write(closed, on: udp)
                        unflushedDatagramBytes += closed.buffer.readableBytes
                        if unflushedDatagramBytes >= Self.datagramFlushBytes {
                            udp.flush()
                            unflushedDatagramBytes = 0
                        }
                    }
                    if batcher.heldBytes >= batcher.maximumBytes {
                        // Open batches to many peers add up: write them all.
                        for batch in batcher.takeAll() { write(batch, on: udp) }
                        udp.flush()
                        unflushedDatagramBytes = 0
                    }
                }
            }
        }
        outgoing.recycle(consume batch)
        // Datagrams first: pumping can run code that sends more, which must not overtake them.
        if let udp = state.datagramSocket, unflushedDatagramBytes + batcher.heldBytes > 0 {
            for batch in batcher.takeAll() { write(batch, on: udp) }
            udp.flush()
        }
        touched.forEach { id, link in
            // Direct writes go out whatever pump does (it may already be running, and returns).
            if link.hasUnflushedWrites, let socket = link.socket {
                link.hasUnflushedWrites = false
                link.flush(orThrough: socket)
            }
            pump(link, peer: id)
        }
    }

    /// Writes a batch of datagrams for one address: alone, or for the kernel to cut into its
    /// datagrams. What a refusal teaches is kept in `segmentation`: a write too large for the path
    /// goes again one datagram at a time; repeated refusals turn segmenting off.
    private func write(_ batch: DatagramBatcher.Batch, on udp: any Channel) {
        guard let segmentSize = batch.writtenSegmentSize else {
            return udp.write(AddressedEnvelope(remoteAddress: batch.address, data: batch.buffer), promise: nil)
        }
        state.value.segmentedDatagramWrites += 1
        let written = eventLoop.makePromise(of: Void.self)
        written.futureResult.whenFailure { [self] error in
            let state = state.value
            let wasEnabled = state.segmentation.enabled
            switch state.segmentation.writeFailed(segmentSize: segmentSize, error: error, socket: ObjectIdentifier(udp)) {
            case .resendSingly:
                configuration.logger.debug("segmented datagrams too large for the path; sending them singly", metadata: ["segment": "\(segmentSize)"])
                guard let udp = state.datagramSocket else { return }
                for datagram in DatagramBatcher.segments(of: batch.buffer, segmentSize: segmentSize) {
                    udp.write(AddressedEnvelope(remoteAddress: batch.address, data: datagram), promise: nil)
                }
                udp.flush()
            case .lost:
                if wasEnabled && !state.segmentation.enabled {
                    configuration.logger.info("segmentation offload refused; datagrams now go one at a time", metadata: ["error": "\(error)"])
                }
            }
        }
        let metadata = AddressedEnvelope<ByteBuffer>.Metadata(ecnState: .transportNotCapable, packetInfo: nil, segmentSize: segmentSize)
        udp.write(AddressedEnvelope(remoteAddress: batch.address, data: batch.buffer, metadata: metadata), promise: written)
    }

    /// Hands a link's queued frames to its socket while the socket takes them, so unsent data waits
    /// in the bounded queue rather than in the socket. On the loop; runs again when it is writable.
    func pump(_ link: EngineState.Link, peer id: LinkID) {
        guard let socket = link.socket, let peer = link.member?.identifier else { return }
        // A flush below can make the socket writable again at once, which calls back in here:
        // that call is remembered and served by this one, never dropped.
        guard !link.pumping else {
            link.pumpAgain = true
            return
        }
        link.pumping = true
        defer { link.pumping = false }
        repeat {
            link.pumpAgain = false
            var released = link.writtenUnflushed
            link.writtenUnflushed = 0
            while !link.outbound.isEmpty {
                var wrote = false
                while socket.isWritable, let frame = link.outbound.popFirst() {
                    link.write(frame, orThrough: socket)
                    released += DeliveryLedger.charge(of: frame)
                    wrote = true
                }
                guard wrote else { break }
                link.flush(orThrough: socket)
            }
            // A member that keeps its messages gives their room back when it acknowledges them.
            if released > 0 && !link.keepsMessages { sendBudget.release(released, for: peer) }
            // Messages first: channel data goes only once none wait.
            if link.outbound.isEmpty { serveChannels(link, on: socket) }
        } while link.pumpAgain && socket.isWritable
    }

    fileprivate func linkWritable(_ id: LinkID) {
        if let link = state.value.links[id], link.member != nil { pump(link, peer: id) }
    }

    /// The UDP port, once the session has started.
    package var datagramPort: EventLoopFuture<Int?> {
        eventLoop.submit { [self] in self.state.value.datagramPort }
    }

    /// Segmented writes sent and joined datagrams received so far, and what the engine learned
    /// about segmenting (`DatagramSegmentation`): whether offload is in use.
    package var datagramOffload: EventLoopFuture<DatagramOffloadReport> {
        eventLoop.submit { [self] in
            let state = self.state.value
            return DatagramOffloadReport(
                segmentedWrites: state.segmentedDatagramWrites, joinedReceived: state.joinedDatagramsReceived, read: state.datagramsRead,
                segmenting: state.segmentation.enabled, refusals: state.segmentation.refusals,
                largestSegment: state.segmentation.largestSegment, socketOpen: state.datagramSocket != nil)
        }
    }

    /// Says goodbye to every peer, reports each as not connected, and stops listening. The engine
    /// can be used again afterwards: the next connection data starts a new listener.
    package func disconnect() -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            let state = state.value
            var closes = state.links.values.compactMap { $0.socket?.closeFuture }
            core.disconnect()
            perform()
            sendBudget.removeAll()
            for socket in [state.listener, state.datagramSocket].compactMap({ $0 }) {
                closes.append(socket.close().recover { _ in })
            }
            state.listener = nil
            state.listenPort = nil
            state.listening = nil
            state.datagramSocket = nil
            state.datagramPort = nil
            return EventLoopFuture.andAllComplete(closes, on: eventLoop)
        }
    }

    // MARK: The core's actions

    /// Carries out what the core decided. On the loop; called after every input to the core.
    private func perform() {
        let state = state.value
        state.core.forEachAction { action in
            switch action {
            case .dial(let id, let plan):
                state.links[id] = EngineState.Link()
                // Our HELLO carries our listening and datagram ports, so both must be up first.
                ensureStarted().whenComplete { [self] result in
                    switch result {
                    case .success: self.dial(id, plan: plan)
                    case .failure: self.dial(id, plan: plan, endpoints: [])
                    }
                }
            case .sendFrame(let frame, let id):
                state.links[id]?.socket?.writeAndFlush(frame, promise: nil)
            case .close(let id, let reason):
                if let link = state.links[id], !state.core.isLive(id) {
                    // The core let the link go (a resumption superseded it): its channels end or
                    // wait for the member's next link now, not when the socket has closed, which
                    // may be after that link brought their offers again.
                    failChannels(of: link)
                }
                if let socket = state.links[id]?.socket {
                    socket.triggerUserOutboundEvent(ConnectionCommand.close(reason), promise: nil)
                } else if !state.core.isLive(id) {
                    state.links.removeValue(forKey: id)?.dial?.abandon()  // still dialing
                }
            case .abort(let id, let error):
                state.links[id]?.socket?.triggerUserOutboundEvent(ConnectionCommand.abort(error), promise: nil)
            case .drop(let id):
                if let link = state.links.removeValue(forKey: id) {
                    failChannels(of: link)
                    link.dial?.abandon()
                    link.socket?.close(promise: nil)
                }
            case .sever(let id):
                if let link = state.links.removeValue(forKey: id) {
                    failChannels(of: link)
                    link.socket?.triggerUserOutboundEvent(ConnectionCommand.sever, promise: nil)
                }
            case .report(let peer, let peerState):
                onEvent(.peerStateChanged(peer, peerState))
            case .refused(let peer, let reason):
                onEvent(.peerRefused(peer, reason))
            case .memberJoined(let peer, let id, let acceptsDatagrams):
                guard let link = state.links[id] else { return }
                setUpMemberLink(link, id, peer: peer)
                sendBudget.add(peer, acceptsDatagrams: acceptsDatagrams)
                link.keepsMessages = state.core.keepsMessages(for: peer.identifier)
                watchHostAddresses()
            case .memberLeft(let peer):
                sendBudget.remove(peer)
                failInterruptedResources(of: peer)
                failKeptStreams(of: peer)
            case .memberSuspended(let peer):
                // The budget stays: the app may go on sending, and the member keeps the messages.
                onEvent(.linkInterrupted(peer))
            case .memberResumed(let peer, let id, let acceptsDatagrams, let resend):
                guard let link = state.links[id] else { return }
                setUpMemberLink(link, id, peer: peer)
                sendBudget.update(peer.identifier, acceptsDatagrams: acceptsDatagrams)
                link.keepsMessages = true
                for message in resend {
                    // Cut as when first sent; within the protocol's limit, since it was sent before.
                    if let frames = try? Frame.messageFragments(of: message) { link.outbound.append(contentsOf: frames) }
                }
                pump(link, peer: id)
                watchHostAddresses()
                resumeInterruptedResources(of: peer.identifier)
                resumeStreams(of: peer.identifier, on: id)
                // After the resent messages are queued: whatever the app sends on hearing it goes behind them.
                onEvent(.linkRestored(peer))
            case .acknowledged(let peer, let charge):
                sendBudget.release(charge, for: peer)
            case .schedule(let timer, let deadline):
                eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
                    core.timerFired(timer, now: eventLoop.now)
                    perform()
                }
            }
        }
    }

    /// A link that carries a member from now on: its channels, budgets and socket marks.
    private func setUpMemberLink(_ link: EngineState.Link, _ id: LinkID, peer: WirePeerID) {
        link.member = peer
        link.mux = LinkMultiplexer(engine: self, link: id)
        widenConnectionWindow(of: link)
        let socket = link.socket
        // Held strongly (a socket does not refer back to its budget): a weak reference would put
        // the socket's every retain and release on the slow path.
        link.receiveBudget = ReceiveBudget(limit: configuration.maximumUndeliveredBytesPerPeer) {
            socket?.triggerUserOutboundEvent(ConnectionCommand.resumeReading, promise: nil)
        }
        // Room for bulk between writability checks without holding much per peer.
        socket?.setOption(.writeBufferWaterMark, value: .init(low: 256 << 10, high: 1 << 20)).whenFailure { _ in }
    }

    /// Counts a delivered message against the link's receive budget, pausing reads past it.
    private func charge(_ link: EngineState.Link?, _ bytes: Int) -> DeliveryReceipt {
        guard let link, let budget = link.receiveBudget else { return .none }
        if budget.charge(bytes) {
            configuration.logger.debug("receive budget full; pausing reads", metadata: ["peer": link.member?.logValue ?? "?"])
            link.socket?.triggerUserOutboundEvent(ConnectionCommand.pauseReading, promise: nil)
        }
        return DeliveryReceipt(budget: budget, bytes: bytes)
    }

    // MARK: Listening and dialing

    /// Binds the UDP socket, then the TCP listener; returns the TCP port.
    private func ensureStarted() -> EventLoopFuture<Int> {
        let state = state.value
        if let listening = state.listening { return listening }
        let address: SocketAddress
        do {
            address = try SocketAddress.listening(on: configuration.listenHost)
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        let listening = bindDatagrams(at: address)
            .flatMap { [self] udp in
                self.state.value.datagramSocket = udp
                self.state.value.datagramPort = udp.localAddress?.port
                self.reopenWhenClosed(udp, at: address)
                return self.bindListener(at: address)
            }
        state.listening = listening
        // A failed start is not remembered, so the next request tries again.
        listening.whenFailure { [self] _ in self.state.value.listening = nil }
        return listening
    }

    private func bindDatagrams(at address: SocketAddress) -> EventLoopFuture<any Channel> {
        DatagramBootstrap(group: eventLoop)
            // Bursts of datagrams outrun the default receive buffer.
            .channelOption(.socketOption(.so_rcvbuf), value: 1 << 20)
            .channelOption(.writeBufferWaterMark, value: Self.datagramWriteMarks)
            // Up to this many datagrams per recvmmsg call, each with room for the largest UDP
            // payload (64 KiB less the UDP header, which also bounds datagrams the kernel joined),
            // so none is truncated. Pages are only touched where datagrams land.
            .channelOption(.datagramVectorReadMessageCount, value: Self.datagramsPerRead)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: Self.datagramsPerRead * Self.receiveSlot))
            .channelInitializer { [configuration] socket in
                // The handler holds the engine weakly; the engine owns the socket.
                socket.eventLoop.makeCompletedFuture {
                    if configuration.datagramSegmentationOffload, System.supportsUDPReceiveOffload, let options = socket.syncOptions {
                        // Sizes first: joined datagrams must never arrive without the size to cut them at.
                        // Without either, datagrams simply arrive one by one.
                        if (try? options.setOption(.datagramReceiveSegmentSize, value: true)) != nil {
                            try? options.setOption(.datagramReceiveOffload, value: true)
                        }
                    }
                    try socket.pipeline.syncOperations.addHandler(DatagramInboundHandler(engine: self))
                }
            }
            .bind(to: address)
    }

    /// SwiftNIO closes a UDP socket when a send fails with most errors (EPERM from a firewall
    /// that drops the datagram, ENETUNREACH, ENOBUFS). The session's socket is bound again on
    /// the same port, which its peers know from HELLO, so unreliable messages go on. On the loop.
    private func reopenWhenClosed(_ udp: any Channel, at address: SocketAddress) {
        udp.closeFuture.whenComplete { [self] _ in
            guard let current = state.value.datagramSocket, current === udp, let port = state.value.datagramPort else { return }
            state.value.datagramSocket = nil
            configuration.logger.info("datagram socket closed after an error; binding it again", metadata: ["port": "\(port)"])
            guard let samePort = try? SocketAddress.listening(on: configuration.listenHost, port: port) else { return }
            bindDatagrams(at: samePort).whenComplete { [self] result in
                guard case .success(let reopened) = result else {
                    return configuration.logger.warning("datagram socket could not be bound again", metadata: ["port": "\(port)"])
                }
                // The session stopped meanwhile (or another socket took over): this one is not needed.
                guard state.value.listening != nil, state.value.datagramSocket == nil else { return reopened.close(promise: nil) }
                state.value.datagramSocket = reopened
                reopenWhenClosed(reopened, at: samePort)
            }
        }
    }

    private func bindListener(at address: SocketAddress) -> EventLoopFuture<Int> {
        StrangerListenerOptions.apply(to: ServerBootstrap(group: eventLoop))
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { [weak self] socket in
                // Out of file descriptors: free one by shedding a pending connection, and retry
                // accept shortly instead of spinning on the failing call.
                socket.eventLoop.makeCompletedFuture {
                    try StrangerListenerOptions.addHandlers(to: socket)
                    try socket.pipeline.syncOperations.addHandler(
                        AcceptBackoffHandler(shouldForwardIOErrorCaught: false) { error in
                            self?.configuration.logger.warning("accept failed; shedding a pending connection and retrying in 20 ms", metadata: ["error": "\(error)"])
                            self?.shedPendingConnection()
                            return .milliseconds(20)
                        })
                }
            }
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [weak self] socket in
                socket.eventLoop.makeCompletedFuture {
                    guard let self else { throw ChannelError.ioOnClosedChannel }
                    let state = self.state.value
                    let (id, shed) = state.core.inboundAccepted(from: PendingSource(socket.remoteAddress), progress: state.handshakeProgress)
                    if let shed { self.shed(shed) }
                    state.links[id] = EngineState.Link(socket: socket)
                    do {
                        try self.installHandlers(on: socket, link: id, role: .listener, plan: nil)
                    } catch {
                        // No connection events will come for this link: forget it now.
                        self.linkClosed(id, ConnectionError(.connectionClosed))
                        throw error
                    }
                }
            }
            .bind(to: address)
            .map { [self] socket in
                let port = socket.localAddress?.port ?? 0
                self.state.value.listener = socket
                self.state.value.listenPort = port
                return port
            }
    }

    /// Dials the plan's endpoints in order, staggered (`StaggeredDial`); the first TCP connection
    /// carries the link.
    private func dial(_ id: LinkID, plan: DialPlan, endpoints: [WireEndpoint]? = nil) {
        guard let link = state.value.links[id] else { return }
        let dial = StaggeredDial(
            endpoints: endpoints ?? plan.endpoints, attemptDelay: plan.attemptDelay, eventLoop: eventLoop,
            connect: { [self] endpoint, opened in
                guard let address = try? endpoint.socketAddress(linkScope: plan.linkScope) else { return nil }
                let opened = NIOLoopBound(opened, eventLoop: eventLoop)
                return ClientBootstrap(group: eventLoop)
                    .connectTimeout(plan.connectTimeout ?? configuration.handshakeTimeout)
                    .channelOption(.socketOption(.tcp_nodelay), value: 1)
                    .channelInitializer { socket in
                        opened.value(socket)
                        return socket.eventLoop.makeSucceededVoidFuture()
                    }
                    .connect(to: address)
            },
            landed: { [self] socket, endpoint in dialLanded(id, socket: socket, at: endpoint, plan: plan) },
            exhausted: { [self] in
                state.value.links[id] = nil
                // Unless the core let the dial go meanwhile.
                guard core.isLive(id) else { return }
                core.dialFailed(id)
                perform()
            },
            failed: { [self] endpoint, error in
                configuration.logger.info("dial failed", metadata: [
                    "peer": plan.peer.logValue, "endpoint": "\(endpoint)", "error": "\(error)",
                ])
            })
        link.dial = dial
        dial.start()
    }

    /// A dial's TCP connection is up: it carries the link, unless the core let the dial go.
    private func dialLanded(_ id: LinkID, socket: any Channel, at endpoint: WireEndpoint, plan: DialPlan) -> StaggeredDial.Landing {
        guard core.isLive(id) else {
            // Cancelled or superseded while connecting.
            state.value.links[id] = nil
            return .letGo
        }
        guard let link = state.value.links[id] else {
            // No path leaves the core with a dial the shell has dropped; should one, the core
            // hears the dial failed rather than wait for it.
            core.dialFailed(id)
            perform()
            return .letGo
        }
        do {
            try installHandlers(on: socket, link: id, role: .dialer, plan: plan)
        } catch {
            return .tryNext
        }
        link.dial = nil
        link.socket = socket
        core.dialConnected(id, at: endpoint)
        return .carries
    }

    private func installHandlers(on socket: any Channel, link id: LinkID, role: ConnectionConfiguration.Role, plan: DialPlan?) throws {
        let state = state.value
        // A dial cancelled or superseded while connecting: its socket closes when the connect lands.
        guard state.core.isLive(id) else { throw ChannelError.ioOnClosedChannel }
        let datagramPort = UInt16(state.datagramPort ?? 0)
        let receiverID = datagramPort == 0 ? 0 : state.core.allocateReceiverID(for: id)
        let connectionConfiguration = ConnectionConfiguration(
            role: role, localPeer: configuration.localPeer, encryptionPreference: configuration.encryptionPreference,
            tls: configuration.tls, purpose: plan?.purpose ?? .answer, token: plan?.token ?? .zero,
            listenPort: UInt16(state.listenPort ?? 0), datagramPort: datagramPort, datagramReceiverID: receiverID,
            recordsPerKeyUpdate: configuration.recordsPerKeyUpdate,
            expectedPeer: plan?.peer.identifier, expectedCertificateFingerprint: plan?.fingerprint,
            resumption: plan?.resumption, logger: configuration.logger)
        let handler = try ConnectionHandler(
            configuration: connectionConfiguration,
            trustEvaluator: { [weak self] request, answer in
                guard let self else { return answer(false) }
                self.trustRequested(request, link: id, answer: answer)
            },
            admission: { [weak self] hello, certificate in self?.admit(hello, certificate, link: id) ?? .refuse(.normal) },
            trustTimeout: configuration.trustTimeout, handshakeTimeout: plan?.handshakeTimeout ?? configuration.handshakeTimeout,
            keepalive: configuration.keepalive)
        // The link's handler first: a dialed socket is active already, so the connection's
        // handler starts as it is added, and whatever it reports at once (a failed first write)
        // must find the link's handler there.
        let linkHandler = LinkHandler(engine: self, link: id)
        try socket.pipeline.syncOperations.addHandler(linkHandler)
        try socket.pipeline.syncOperations.addHandler(handler, position: .before(linkHandler))
        state.links[id]?.handler = handler
    }

    fileprivate func shedPendingConnection() {
        let state = state.value
        if let id = state.core.pendingToShed(progress: state.handshakeProgress) { shed(id) }
    }

    private func shed(_ id: LinkID) {
        let socket = state.value.links[id]?.socket
        // Debug only: a flood sheds thousands a second.
        configuration.logger.debug("shed a pending connection to make room", metadata: [
            "remote": "\(socket?.remoteAddress.map { "\($0)" } ?? "?")",
            "progress": "\(state.value.handshakeProgress(id).stage)",
        ])
        socket?.close(promise: nil)
    }

    // MARK: Connection events (on the loop)

    private func admit(_ hello: Hello, _ certificate: [UInt8]?, link id: LinkID) -> ConnectionConfiguration.Admission {
        let admission = core.admit(hello, peerCertificate: certificate, on: id, now: eventLoop.now)
        perform()
        return admission
    }

    private func trustRequested(_ request: PeerTrustRequest, link id: LinkID, answer: @escaping @Sendable (Bool) -> Void) {
        eventLoop.preconditionInEventLoop()
        let ask = core.trustRequested(request, on: id)
        perform()
        if ask { onEvent(.trustRequested(request, answer: answer)) } else { answer(false) }
    }

    fileprivate func linkEstablished(
        _ id: LinkID, _ connection: EstablishedConnection, tls: TLSEngine?, remote: SocketAddress?, local: SocketAddress?
    ) {
        state.value.links[id]?.peerFingerprint = connection.certificateChain?.first?.sha256Fingerprint
        var scope: UInt32?
        if case .v6(let address) = remote, address.address.sin6_scope_id != 0 { scope = address.address.sin6_scope_id }
        core.established(connection, on: id, remoteHost: remote?.ipAddress, remoteScope: scope, localHost: local.flatMap(HostAddresses.host)) {
            direction, epoch in
            try? tls?.exportKeyingMaterial(
                label: direction.exporterLabel, context: DatagramDirection.exporterContext(epoch: epoch),
                length: DatagramCipher.keyLength)
        }
        perform()
    }

    fileprivate func linkReceived(_ id: LinkID, _ frame: Frame) {
        if frame.type.isChannelFrame {
            channelFrameReceived(frame, on: id)
            return
        }
        if let (message, peer) = core.received(frame, on: id, now: self.eventLoop.now) {
            state.value.deliveredInReadPass = true
            onEvent(.messageReceived(message, from: peer, receipt: charge(state.value.links[id], message.readableBytes)))
        }
        perform()
    }

    /// A read is over: tells the application's side, if it delivered messages.
    fileprivate func readPassEnded() {
        let state = state.value
        guard state.deliveredInReadPass else { return }
        state.deliveredInReadPass = false
        onReadPassEnded()
    }

    /// One UDP datagram from anywhere: authenticated or dropped, never answered.
    /// One datagram, or several the kernel joined (each its own sealed datagram, cut apart here).
    fileprivate func datagramsReceived(_ envelope: AddressedEnvelope<ByteBuffer>) {
        guard let segmentSize = envelope.metadata?.segmentSize, envelope.data.readableBytes > segmentSize else {
            state.value.datagramsRead += 1
            return datagramReceived(envelope.data, from: envelope.remoteAddress)
        }
        let segments = DatagramBatcher.segments(of: envelope.data, segmentSize: segmentSize)
        state.value.datagramsRead += segments.count
        state.value.joinedDatagramsReceived += segments.count
        for segment in segments { datagramReceived(segment, from: envelope.remoteAddress) }
    }

    private func datagramReceived(_ datagram: ByteBuffer, from address: SocketAddress) {
        let state = state.value
        // Unreliable: past the receive budget a datagram is dropped rather than held, and unopened.
        let delivered = core.datagramReceived(datagram, from: address) { id, length in
            state.links[id]?.receiveBudget?.hasRoom(for: length) ?? true
        }
        perform()
        guard let (message, peer, id) = delivered, let link = state.links[id] else { return }
        state.deliveredInReadPass = true
        onEvent(.messageReceived(message, from: peer, receipt: charge(link, message.readableBytes)))
    }

    fileprivate func linkClosed(_ id: LinkID, _ error: ConnectionError) {
        let link = state.value.links.removeValue(forKey: id)
        core.closed(id, error, now: eventLoop.now)
        // The core has decided whether the member outlives the link (its channels then wait for
        // the next), but nothing it decided is carried out yet: channels end before the app
        // hears that the peer left.
        if let link { failChannels(of: link) }
        perform()
        readPassEnded()  // a connection closed by its read gets no read-complete
    }

    // MARK: Addresses

    /// While members are connected, tells the core the host's addresses every half second, so a
    /// connection whose address went (the host moved) is lost at once, not at the dead-peer deadline.
    private func watchHostAddresses() {
        let state = state.value
        guard state.addressWatch == nil else { return }
        state.addressWatch = eventLoop.scheduleRepeatedAsyncTask(initialDelay: Self.addressWatchInterval, delay: Self.addressWatchInterval) {
            [weak self, eventLoop] task in
            guard let self, core.hasConnectedMembers || core.hasSuspendedMembers else {
                self?.state.value.addressWatch = nil
                task.cancel()
                return eventLoop.makeSucceededVoidFuture()
            }
            // Off the loop: a host with many interfaces takes a while to list.
            return fileIOPool.runIfActive(eventLoop: eventLoop) { HostAddresses.current() }.map { [weak self] addresses in
                // Unknown is not empty: a failed look-up loses nothing.
                guard let self, let addresses, !addresses.isEmpty else { return }
                core.localAddressesChanged(to: addresses, now: eventLoop.now)
                perform()
            }.recover { _ in }
        }
    }

    private func advertisedEndpoints(port: Int) throws -> [WireEndpoint] {
        guard port > 0, port <= Int(UInt16.max) else { throw WireError(.invalidValue, "listener port \(port)") }
        let hosts: [String]
        if let advertised = configuration.advertisedAddresses {
            hosts = advertised
        } else if configuration.listenHost == "0.0.0.0" || configuration.listenHost == "::" {
            // A "0.0.0.0" listener takes IPv4 only; "::" takes both families (Linux's default).
            let bothFamilies = configuration.listenHost == "::"
            let devices = (try? System.enumerateDevices()) ?? []
            let addresses = devices.compactMap(\.address).filter { bothFamilies || $0.protocol == .inet }.compactMap(\.ipAddress)
            let loopback = addresses.filter { $0 == "127.0.0.1" || $0 == "::1" }
            let linkLocal = addresses.filter { host in
                (try? SocketAddress(ipAddress: host, port: 1)).flatMap { try? WireEndpoint(socketAddress: $0).isLinkLocal } ?? false
            }
            let routable = addresses.filter { !loopback.contains($0) && !linkLocal.contains($0) }
            // Routable first; link-local next (only a dialer that knows the link uses those,
            // §9.2); loopback last, and kept when the list is cut, so a peer on this machine
            // still finds us.
            let limit = WireLimits.maxConnectionDataEndpoints - min(loopback.count, 1)
            hosts = Array((routable + linkLocal).prefix(limit)) + loopback.prefix(1)
        } else {
            hosts = [configuration.listenHost]
        }
        var endpoints: [WireEndpoint] = []
        for host in hosts {
            // Link-local text carries its interface ("fe80::1%eth0"), which the wire form drops.
            let bare = host.split(separator: "%", maxSplits: 1).first.map(String.init) ?? host
            guard let address = try? SocketAddress(ipAddress: bare, port: port) else { continue }
            let endpoint = try WireEndpoint(socketAddress: address)
            if !endpoints.contains(endpoint) { endpoints.append(endpoint) }
        }
        guard !endpoints.isEmpty else { throw WireError(.invalidValue, "no address to advertise") }
        return Array(endpoints.prefix(WireLimits.maxConnectionDataEndpoints))
    }
}

/// Connects a socket's connection events to the engine.
private final class LinkHandler: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    /// Weak: the engine owns its connections, not the other way round.
    weak var engine: SessionEngine?
    let link: LinkID

    init(engine: SessionEngine, link: LinkID) {
        self.engine = engine
        self.link = link
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let engine else { return }
        switch unwrapInboundIn(data) {
        case .established(let connection):
            let tls = try? context.pipeline.syncOperations.handler(type: ConnectionHandler.self).tlsEngine
            engine.linkEstablished(link, connection, tls: tls, remote: context.channel.remoteAddress, local: context.channel.localAddress)
        case .frame(let frame): engine.linkReceived(link, frame)
        case .closed(let error): engine.linkClosed(link, error)
        case .invitationReceived, .invitationAnswered:
            break  // a session's links never carry invitations (its admission refuses purpose 2)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { engine?.linkWritable(link) }
        context.fireChannelWritabilityChanged()
    }

    /// A link closed during its read ends it in `linkClosed` instead.
    func channelReadComplete(context: ChannelHandlerContext) {
        engine?.readPassEnded()
        context.fireChannelReadComplete()
    }
}

/// Hands every UDP datagram to the engine.
private final class DatagramInboundHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var engine: SessionEngine?

    init(engine: SessionEngine) { self.engine = engine }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        engine?.datagramsReceived(unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        engine?.readPassEnded()
        context.fireChannelReadComplete()
    }

    /// A read that fails for good ends without a read-complete.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        engine?.readPassEnded()
        context.fireErrorCaught(error)
    }

    /// A socket closed during its own read ends it without a read-complete or an error.
    func channelInactive(context: ChannelHandlerContext) {
        engine?.readPassEnded()
        context.fireChannelInactive()
    }
}

/// The shell's mutable state; only touched on the engine's event loop.
/// Our resources and the peer's, cut off by a lost link, as the engine keeps them.
typealias InterruptedResources = InterruptedTransfers<ResourceSender.Source, ResourceTransfer, ResourceReceiver>

final class EngineState {
    /// The I/O side of one link; its protocol state is in the core.
    final class Link {
        // Exclusivity unchecked: touched on the engine's loop only, for every message sent.
        @exclusivity(unchecked) var socket: (any Channel)?
        /// The connection's handler: every frame sent is handed to it, and its handshake progress
        /// decides which connections are shed. Strong: the link goes when the connection closes,
        /// and weak references slow refcounting.
        @exclusivity(unchecked) var handler: ConnectionHandler?
        /// The peer, once connected.
        @exclusivity(unchecked) var member: WirePeerID?
        /// Reliable frames waiting for the socket to take them (bounded by the send budget).
        @exclusivity(unchecked) var outbound = CircularBuffer<Frame>()
        /// Payload bytes written straight to the socket (the queue was empty) and not yet flushed.
        @exclusivity(unchecked) var writtenUnflushed = 0
        @exclusivity(unchecked) var hasUnflushedWrites = false
        @exclusivity(unchecked) var pumping = false
        /// `pump` was asked for while it ran (the socket became writable during a flush).
        @exclusivity(unchecked) var pumpAgain = false
        /// The member keeps what is sent until it acknowledges it (docs/PROTOCOL.md §7.9): its
        /// send budget comes back then, not when the socket takes the bytes.
        @exclusivity(unchecked) var keepsMessages = false
        @exclusivity(unchecked) var receiveBudget: ReceiveBudget?
        /// The peer's certificate fingerprint once connected; nil without an identity.
        @exclusivity(unchecked) var peerFingerprint: [UInt8]?
        /// Streams and resources, once connected.
        @exclusivity(unchecked) var mux: LinkMultiplexer?
        /// A dial's connects, until one carries the link (on the loop).
        var dial: StaggeredDial?

        init(socket: (any Channel)? = nil) { self.socket = socket }

        /// Straight to the connection's handler while it is in the pipeline (on the loop), else
        /// through `socket`, the link's own.
        func write(_ frame: Frame, orThrough socket: any Channel) {
            if handler?.write(frame) != true { socket.write(frame, promise: nil) }
        }

        func flush(orThrough socket: any Channel) {
            if handler?.flush() != true { socket.flush() }
        }
    }

    let core: SessionCore
    @exclusivity(unchecked) var links: [LinkID: Link] = [:]
    var listener: (any Channel)?
    var listenPort: Int?
    var listening: EventLoopFuture<Int>?
    var datagramSocket: (any Channel)?
    var datagramPort: Int?
    /// Whether and how far bursts to one address are joined into segmented writes.
    var segmentation: DatagramSegmentation
    /// A segmented write's limits; tests raise them past the kernel's to see it refuse.
    var segmentsPerWrite = DatagramBatcher.kernelSegmentLimit
    var bytesPerSegmentedWrite: Int
    /// Writes that the kernel cut into several datagrams, and datagrams that arrived joined.
    var segmentedDatagramWrites = 0
    var joinedDatagramsReceived = 0
    /// Every datagram read from the socket, whatever became of it.
    var datagramsRead = 0
    /// A message was delivered since the last `readPassEnded` event.
    var deliveredInReadPass = false
    /// The timer that deletes kept partials when the earliest one's lifetime ends.
    var resumeExpiry: (deadline: NIODeadline, task: Scheduled<Void>)?
    /// Resources cut off by a lost link of a member that recovers, until it is resumed or leaves.
    let interruptedResources: InterruptedResources
    /// Each member's streams that can outlive its connection (docs/PROTOCOL.md §7.10).
    var memberStreams: [Bytes16: MemberStreamEndpoints] = [:]
    /// The look at the host's addresses, repeated while members are connected.
    var addressWatch: RepeatedTask?

    /// How far a pending link's handshake got, for deciding which to shed.
    func handshakeProgress(_ id: LinkID) -> PendingProgress {
        PendingProgress(links[id]?.handler)
    }

    init(core: SessionCore, segmentsDatagrams: Bool, bytesPerSegmentedWrite: Int, incomingResourcesPerPeer: Int) {
        self.core = core
        interruptedResources = InterruptedResources(completedLimit: incomingResourcesPerPeer)
        segmentation = DatagramSegmentation(enabled: segmentsDatagrams)
        self.bytesPerSegmentedWrite = bytesPerSegmentedWrite
    }
}
