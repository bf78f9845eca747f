import Logging
import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization

/// The session behind MCSession: one TCP listener and one secure connection per peer, all on one
/// event loop. Everything mutable lives on that loop; the public methods hop onto it.
public final class SessionEngine: Sendable {
    public let configuration: SessionEngineConfiguration
    public let eventLoop: any EventLoop
    private let state: NIOLoopBoundBox<EngineState>
    private let onEvent: @Sendable (SessionEngineEvent) -> Void
    /// Tests divert outgoing datagrams here (return false to keep one off the wire) to replay and
    /// reorder them over real UDP.
    let outgoingDatagramInterceptor = Mutex<(@Sendable (ByteBuffer) -> Bool)?>(nil)
    /// Connected peers and their send queues, readable from any thread, so that `send` can refuse
    /// at once.
    private let sendBudget: SendBudget
    private let outgoing = SendQueue<Outgoing>()

    private enum Outgoing: Sendable {
        case reliable([Frame], to: [Bytes16])
        case unreliable(ByteBuffer, to: [Bytes16])
    }

    /// Datagrams go out in sendmmsg batches of about this size, which stays below the channel's
    /// write-buffer high-water mark so that a batch never makes its own tail look unwritable.
    private static let datagramFlushBytes = 32 * 1024
    private static let datagramsPerRead = 16

    public init(
        configuration: SessionEngineConfiguration,
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(),
        onEvent: @escaping @Sendable (SessionEngineEvent) -> Void
    ) {
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.onEvent = onEvent
        state = .makeBoxSendingValue(EngineState(), eventLoop: eventLoop)
        sendBudget = SendBudget(limitPerPeer: configuration.maximumQueuedBytesPerPeer)
    }

    public var connectedPeers: [WirePeerID] {
        sendBudget.peers.sorted { $0.identifier < $1.identifier }
    }

    // MARK: Connection data

    /// Starts listening if needed and returns a blob that `peer` can dial us with, once, for 120 s.
    public func connectionData(forPeer peer: Bytes16) -> EventLoopFuture<ConnectionData> {
        eventLoop.flatSubmit { [self] in
            ensureStarted().flatMapThrowing { port in
                let token = Bytes16.random()
                let expiry = self.eventLoop.now + .seconds(Int64(WireLimits.connectionTokenLifetimeSeconds))
                self.state.value.tokens[token] = EngineState.Token(forPeer: peer, expires: expiry)
                return try ConnectionData(
                    encryptionPreference: self.configuration.encryptionPreference, token: token, forPeer: peer,
                    peerID: self.configuration.localPeer,
                    certificateFingerprint: try self.configuration.tls.identity.map {
                        try SHA256Digest(bytes: $0.certificate.sha256Fingerprint)
                    },
                    endpoints: try self.advertisedEndpoints(port: port))
            }
        }
    }

    /// Dials the peer that made `data`. The outcome arrives as peer state events.
    public func connect(to data: ConnectionData) {
        eventLoop.execute { [self] in
            let peer = data.peerID.identifier
            let state = state.value
            guard state.linkIDs(for: peer).isEmpty else { return }  // already connecting or connected
            guard state.hasRoomForMember(besides: peer) else {
                report(data.peerID, .connecting)
                report(data.peerID, .notConnected(ConnectionError(.notAdmitted(.sessionFull))))
                return
            }
            startDialing(DialPlan(data))
        }
    }

    /// Opens a dialed link and reports the peer as connecting. On the loop.
    private func startDialing(_ plan: DialPlan, attempt: Int = 0) {
        let link = EngineState.Link(dialed: true, peer: plan.peer, plan: plan)
        link.attempt = attempt
        let linkID = state.value.addLink(link)
        report(plan.peer, .connecting)
        // Our HELLO carries our listening and datagram ports, so both must be up first.
        ensureStarted().whenComplete { [self] result in
            switch result {
            case .success: self.dial(linkID: linkID, plan: plan, endpoints: plan.endpoints[...])
            case .failure: self.dial(linkID: linkID, plan: plan, endpoints: [])
            }
        }
    }

    /// Abandons a connection attempt that has not completed.
    public func cancelConnect(peer: Bytes16) {
        eventLoop.execute { [self] in
            let state = state.value
            for linkID in state.linkIDs(for: peer) where !state.links[linkID]!.isConnected {
                state.links[linkID]?.closingSilently = true
                state.links[linkID]?.channel?.close(promise: nil)
                if let wire = state.links[linkID]?.peer {
                    state.links[linkID] = nil
                    report(wire, .notConnected(ConnectionError(.closedLocally)))
                }
            }
        }
    }

    // MARK: Messages

    /// Queues a reliable message to each peer; returns at once. Throws for an empty peer list, an
    /// unconnected peer, an oversized message or a full send queue, and then sends nothing.
    public func send(_ message: ByteBuffer, to peers: [Bytes16]) throws(SessionSendError) {
        guard !peers.isEmpty else { throw .noPeers }
        guard message.readableBytes <= WireLimits.maxMessageSize else { throw .messageTooLarge(message.readableBytes) }
        let frames: [Frame]
        do {
            frames = try Frame.messageFragments(of: message)
        } catch {
            throw .messageTooLarge(message.readableBytes)
        }
        do {
            try sendBudget.reserve(message.readableBytes, for: peers)
        } catch {
            switch error {
            case .notConnected(let unknown): throw .notConnected(unknown)
            case .full(let full): throw .queueFull(full)
            }
        }
        enqueue(.reliable(frames, to: peers))
    }

    /// Returns once each peer's send queue has room for a message of `bytes` (or the peer left).
    public func waitForSendRoom(_ bytes: Int, to peers: [Bytes16]) async {
        await sendBudget.waitForRoom(bytes, for: peers)
    }

    /// Reliable bytes queued to `peer` and not yet handed to its socket.
    public func queuedBytes(to peer: Bytes16) -> Int { sendBudget.queuedBytes(to: peer) }

    /// Sends one datagram to each peer; returns at once. Unreliable: a datagram that cannot be
    /// written at once is dropped. Throws like `send` for bad peers or sizes, and then sends nothing.
    public func sendUnreliable(_ message: ByteBuffer, to peers: [Bytes16]) throws(SessionSendError) {
        guard !peers.isEmpty else { throw .noPeers }
        guard message.readableBytes <= configuration.maximumDatagramMessage else { throw .messageTooLarge(message.readableBytes) }
        let unknown = peers.filter { !sendBudget.isConnected($0) }
        guard unknown.isEmpty else { throw .notConnected(unknown) }
        let withoutDatagrams = peers.filter { !sendBudget.acceptsDatagrams($0) }
        guard withoutDatagrams.isEmpty else { throw .datagramsUnsupported(withoutDatagrams) }
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
        var touched: [Int: EngineState.Link] = [:]
        var unflushedDatagramBytes = 0
        for item in outgoing.takeAll() {
            switch item {
            case .reliable(let frames, let peers):
                for peer in peers {
                    guard let linkID = state.activeLink[peer], let link = state.links[linkID] else {
                        // The peer left after send reserved room: give the room back.
                        sendBudget.release(frames.reduce(0) { $0 + $1.payloadLength }, for: peer)
                        continue
                    }
                    link.outbound.append(contentsOf: frames)
                    touched[linkID] = link
                }
            case .unreliable(let message, let peers):
                guard let udp = state.datagramChannel else { continue }
                for peer in peers {
                    // Unreliable: when the socket cannot take it now, the datagram is dropped.
                    guard udp.isWritable, let linkID = state.activeLink[peer], let link = state.links[linkID],
                        let address = link.datagramAddress, let datagram = link.datagram?.seal(message)
                    else { continue }
                    if let intercept = outgoingDatagramInterceptor.withLock({ $0 }), !intercept(datagram) { continue }
                    udp.write(AddressedEnvelope(remoteAddress: address, data: datagram), promise: nil)
                    unflushedDatagramBytes += datagram.readableBytes
                    if unflushedDatagramBytes >= Self.datagramFlushBytes {
                        udp.flush()
                        unflushedDatagramBytes = 0
                    }
                }
            }
        }
        for link in touched.values { pump(link) }
        if unflushedDatagramBytes > 0 { state.datagramChannel?.flush() }
    }

    /// Hands a link's queued frames to its socket while the socket takes them, so unsent data waits
    /// in the bounded queue rather than in the channel. On the loop; runs again when it is writable.
    private func pump(_ link: EngineState.Link) {
        guard !link.pumping, let channel = link.channel, let peer = link.peer?.identifier else { return }
        link.pumping = true
        defer { link.pumping = false }
        var released = 0
        while !link.outbound.isEmpty {
            var wrote = false
            while channel.isWritable, let frame = link.outbound.popFirst() {
                channel.write(frame, promise: nil)
                released += frame.payloadLength
                wrote = true
            }
            guard wrote else { break }
            channel.flush()  // may make the channel writable again at once
        }
        if released > 0 { sendBudget.release(released, for: peer) }
    }

    fileprivate func linkWritable(_ linkID: Int) {
        if let link = state.value.links[linkID], link.isConnected { pump(link) }
    }

    /// The UDP port, once the session has started.
    public var datagramPort: EventLoopFuture<Int?> {
        eventLoop.submit { [self] in self.state.value.datagramPort }
    }

    /// Says goodbye to every peer, reports each as not connected, and stops listening. The engine
    /// can be used again afterwards: the next connection data starts a new listener.
    public func disconnect() -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            let state = state.value
            var closes: [EventLoopFuture<Void>] = []
            for (linkID, link) in state.links {
                state.links[linkID]?.closingSilently = true
                if let channel = link.channel { closes.append(channel.close().recover { _ in }) }
            }
            for reported in state.reported.values {
                report(reported.peer, .notConnected(ConnectionError(.closedLocally)))
            }
            sendBudget.removeAll()
            state.links.removeAll()
            state.activeLink.removeAll()
            state.tokens.removeAll()
            if let listener = state.listener {
                closes.append(listener.close().recover { _ in })
            }
            if let udp = state.datagramChannel { closes.append(udp.close().recover { _ in }) }
            state.listener = nil
            state.listenPort = nil
            state.listening = nil
            state.datagramChannel = nil
            state.datagramPort = nil
            state.receiverIDs.removeAll()
            return EventLoopFuture.andAllComplete(closes, on: eventLoop)
        }
    }

    // MARK: Listening and dialing

    /// Binds the UDP socket, then the TCP listener; returns the TCP port.
    private func ensureStarted() -> EventLoopFuture<Int> {
        let state = state.value
        if let listening = state.listening { return listening }
        let listening = DatagramBootstrap(group: eventLoop)
            // Bursts of datagrams outrun the default receive buffer.
            .channelOption(.socketOption(.so_rcvbuf), value: 1 << 20)
            // Up to this many datagrams per recvmmsg call, each with room for the largest datagram
            // the protocol allows, so none is truncated. Pages are only touched where datagrams land.
            .channelOption(.datagramVectorReadMessageCount, value: Self.datagramsPerRead)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: Self.datagramsPerRead * WireLimits.maxUDPPayload))
            .channelInitializer { channel in
                // The handler holds the engine weakly; the engine owns the socket.
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(DatagramInboundHandler(engine: self))
                }
            }
            .bind(host: configuration.listenHost, port: 0)
            .flatMap { [self] udp in
                self.state.value.datagramChannel = udp
                self.state.value.datagramPort = udp.localAddress?.port
                return self.bindListener()
            }
        state.listening = listening
        // A failed start is not remembered, so the next request tries again.
        listening.whenFailure { [self] _ in self.state.value.listening = nil }
        return listening
    }

    private func bindListener() -> EventLoopFuture<Int> {
        ServerBootstrap(group: eventLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { [weak self] channel in
                // Out of file descriptors: free one by shedding a pending connection, and retry
                // accept shortly instead of spinning on the failing call.
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptBackoffHandler(shouldForwardIOErrorCaught: false) { error in
                            self?.configuration.logger.warning("accept failed; shedding a pending connection and retrying in 20 ms", metadata: ["error": "\(error)"])
                            self?.shedPendingConnection()
                            return .milliseconds(20)
                        })
                }
            }
            // Room for bursts (a mesh forming, stray or hostile connects) without dropped SYNs,
            // whose retransmission would delay a real peer by a second or more.
            .serverChannelOption(.backlog, value: 128)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let self else { throw ChannelError.ioOnClosedChannel }
                    if self.state.value.pendingInboundCount >= self.configuration.maximumPendingConnections {
                        self.shedPendingConnection()
                    }
                    let linkID = self.state.value.addLink(EngineState.Link(dialed: false, channel: channel))
                    try self.installHandlers(on: channel, linkID: linkID, role: .listener, plan: nil)
                }
            }
            .bind(host: configuration.listenHost, port: 0)
            .map { [self] channel in
                let port = channel.localAddress?.port ?? 0
                self.state.value.listener = channel
                self.state.value.listenPort = port
                return port
            }
    }

    private func dial(linkID: Int, plan: DialPlan, endpoints: ArraySlice<WireEndpoint>) {
        guard let endpoint = endpoints.first else {
            if let link = state.value.links.removeValue(forKey: linkID), let peer = link.peer {
                report(peer, .notConnected(ConnectionError(.connectionClosed)))
            }
            return
        }
        ClientBootstrap(group: eventLoop)
            .connectTimeout(configuration.handshakeTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.installHandlers(on: channel, linkID: linkID, role: .dialer, plan: plan)
                }
            }
            .connect(to: try! endpoint.socketAddress())
            .whenComplete { [self] result in
                let state = self.state.value
                guard state.links[linkID] != nil else {
                    if case .success(let channel) = result { channel.close(promise: nil) }  // cancelled meanwhile
                    return
                }
                switch result {
                case .success(let channel): state.links[linkID]?.channel = channel
                case .failure: self.dial(linkID: linkID, plan: plan, endpoints: endpoints.dropFirst())
                }
            }
    }

    private func installHandlers(on channel: any Channel, linkID: Int, role: ConnectionConfiguration.Role, plan: DialPlan?) throws {
        let state = state.value
        let datagramPort = UInt16(state.datagramPort ?? 0)
        let receiverID = datagramPort == 0 ? 0 : state.allocateReceiverID(for: linkID)
        let connectionConfiguration = ConnectionConfiguration(
            role: role, localPeer: configuration.localPeer, encryptionPreference: configuration.encryptionPreference,
            tls: configuration.tls, purpose: plan?.purpose ?? .answer, token: plan?.token ?? .zero,
            listenPort: UInt16(state.listenPort ?? 0), datagramPort: datagramPort, datagramReceiverID: receiverID,
            recordsPerKeyUpdate: configuration.recordsPerKeyUpdate,
            expectedPeer: plan?.peer.identifier, expectedCertificateFingerprint: plan?.fingerprint,
            admission: { [weak self] hello in self?.admit(hello, linkID: linkID) ?? .refuse(.normal) })
        let handler = try ConnectionHandler(
            configuration: connectionConfiguration,
            trustEvaluator: { [weak self] request, answer in
                guard let self else { return answer(false) }
                self.trustRequested(request, linkID: linkID, plan: plan, answer: answer)
            },
            trustTimeout: configuration.trustTimeout, handshakeTimeout: configuration.handshakeTimeout,
            keepalive: configuration.keepalive)
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.pipeline.syncOperations.addHandler(LinkHandler(engine: self, linkID: linkID))
        state.links[linkID]?.handler = handler
    }

    /// Closes the inbound connection that is least advanced in its handshake and, among those,
    /// silent the longest: idle and trickling strangers go before peers that are nearly in.
    fileprivate func shedPendingConnection() {
        let state = state.value
        let pending = state.links.values.filter { !$0.dialed && !$0.isConnected && $0.channel != nil }
        let oldest = pending.min { first, second in
            (first.handler?.establishmentProgress ?? 0, first.handler?.lastActivity ?? .distantPast)
                < (second.handler?.establishmentProgress ?? 0, second.handler?.lastActivity ?? .distantPast)
        }
        guard let oldest else { return }
        configuration.logger.notice("shed a pending connection to make room", metadata: [
            "remote": "\(oldest.channel?.remoteAddress.map { "\($0)" } ?? "?")",
            "progress": "\(oldest.handler?.establishmentProgress ?? 0)",
        ])
        oldest.channel?.close(promise: nil)
    }

    // MARK: Link events (on the loop)

    /// A listener's decision on a dialer's HELLO (docs/PROTOCOL.md §7.5, §9.3).
    private func admit(_ hello: Hello, linkID: Int) -> ConnectionConfiguration.Admission {
        let admission = decideAdmission(hello, linkID: linkID)
        if case .refuse(let reason) = admission {
            configuration.logger.notice("refused a connection", metadata: ["peer": hello.peerID.logValue, "reason": "\(reason)"])
            if reason != .duplicateConnection { onEvent(.peerRefused(hello.peerID, reason)) }
        }
        return admission
    }

    private func decideAdmission(_ hello: Hello, linkID: Int) -> ConnectionConfiguration.Admission {
        let state = state.value
        let peer = hello.peerID.identifier
        state.expireTokens(now: eventLoop.now)
        switch hello.purpose {
        case .connectionData:
            guard let token = state.tokens[hello.token], token.forPeer == peer else { return .refuse(.unknownToken) }
            state.tokens[hello.token] = nil  // single use
        case .meshIntroduction:
            // A member we are connected to must have introduced this peer to us (docs/PROTOCOL.md §7.4).
            guard state.activeLink[hello.token] != nil,
                state.introductions.consume(peer, by: hello.token, now: eventLoop.now)
            else { return .refuse(.unknownToken) }
        case .invitation, .answer:
            return .refuse(.unknownToken)
        }
        for otherID in state.linkIDs(for: peer) where otherID != linkID {
            let other = state.links[otherID]!
            // Both dialed at once: the connection dialed by the larger identifier survives.
            if other.dialed && !other.isConnected && peer > configuration.localPeer.identifier {
                state.links[otherID]?.closingSilently = true
                if let channel = other.channel {
                    channel.triggerUserOutboundEvent(ConnectionCommand.close(.duplicateConnection), promise: nil)
                } else {
                    state.links[otherID] = nil  // still dialing: its connect closes the socket when it lands
                }
            } else {
                return .refuse(.duplicateConnection)
            }
        }
        guard state.hasRoomForMember(besides: peer) else { return .refuse(.sessionFull) }
        state.links[linkID]?.peer = hello.peerID
        return .admit
    }

    private func trustRequested(_ request: PeerTrustRequest, linkID: Int, plan: DialPlan?, answer: @escaping @Sendable (Bool) -> Void) {
        eventLoop.preconditionInEventLoop()
        // The connection already ended a dial that met another certificate or peer ID than the
        // plan named (docs/PROTOCOL.md §9.3); this keeps a mismatch from ever reaching the app.
        if let plan, request.peer.identifier != plan.peer.identifier {
            answer(false)
            return
        }
        state.value.links[linkID]?.peer = request.peer
        report(request.peer, .connecting)
        onEvent(.trustRequested(request, answer: answer))
    }

    fileprivate func linkEstablished(_ linkID: Int, _ connection: EstablishedConnection, tls: TLSEngine?, remote: SocketAddress?) {
        let state = state.value
        guard let link = state.links[linkID] else { return }
        // Admission and dialing already keep the member limit; this holds it whatever the path.
        let connectedOthers = state.activeLink.keys.filter { $0 != connection.peer.identifier }.count
        guard connectedOthers < WireLimits.maxSessionMembers - 1 else {
            link.channel?.triggerUserOutboundEvent(ConnectionCommand.close(.sessionFull), promise: nil)
            return
        }
        link.isConnected = true
        link.peer = connection.peer
        let hello = connection.peerHello
        if hello.datagramPort != 0, let host = remote?.ipAddress, let address = try? SocketAddress(ipAddress: host, port: Int(hello.datagramPort)) {
            link.datagramAddress = address
            link.datagram = DatagramPeerState(
                isEncrypted: connection.isEncrypted, weAreDialer: link.dialed, peerReceiverID: hello.datagramReceiverID,
                limits: configuration.datagramLimits,
                keySource: { direction, epoch in
                    try? tls?.exportKeyingMaterial(
                        label: direction.exporterLabel, context: DatagramDirection.exporterContext(epoch: epoch),
                        length: DatagramCipher.keyLength)
                })
        }
        state.activeLink[connection.peer.identifier] = linkID
        if hello.listenPort != 0, let host = remote?.ipAddress, let address = try? SocketAddress(ipAddress: host, port: Int(hello.listenPort)) {
            link.listenEndpoint = try? WireEndpoint(socketAddress: address)
        }
        let channel = link.channel
        link.receiveBudget = ReceiveBudget(limit: configuration.maximumUndeliveredBytesPerPeer) { [weak channel] in
            channel?.triggerUserOutboundEvent(ConnectionCommand.resumeReading, promise: nil)
        }
        // Room for bulk between writability checks without holding much per peer.
        channel?.setOption(.writeBufferWaterMark, value: .init(low: 256 << 10, high: 1 << 20)).whenFailure { _ in }
        sendBudget.add(connection.peer, acceptsDatagrams: link.datagram != nil)
        configuration.logger.info("connected", metadata: [
            "peer": connection.peer.logValue, "encrypted": "\(connection.isEncrypted)",
            "cipherSuite": "\(connection.cipherSuite ?? "none")", "dialed": "\(link.dialed)",
        ])
        report(connection.peer, .connected)
        // A member that joined through an introduction already knows everyone the introducer knew.
        let joinedByIntroduction = link.plan?.purpose == .meshIntroduction || hello.purpose == .meshIntroduction
        if !joinedByIntroduction { introduceMembers(toAndAbout: linkID) }
    }

    fileprivate func linkReceived(_ linkID: Int, _ frame: Frame) {
        guard let link = state.value.links[linkID], let peer = link.peer else { return }
        switch frame {
        case .message(let fragment, let isEnd):
            do {
                if let message = try link.assembler.append(fragment, isEnd: isEnd) {
                    onEvent(.messageReceived(message, from: peer, receipt: charge(link, message.readableBytes)))
                }
            } catch {
                // The app learns why: a message over the limit is the peer's violation.
                link.channel?.triggerUserOutboundEvent(ConnectionCommand.abort(ConnectionError(.protocolViolation(error))), promise: nil)
            }
        case .meshIntroduction(let introduction) where link.isConnected:
            introduced(introduction, by: peer)
        default:
            // PONG needs nothing, and a MESH_INTRODUCTION on a link refused after trust is ignored.
            // Stream, resource and window frames never get here: the connection answers them itself
            // (refusal, discard or GOODBYE, docs/PROTOCOL.md §7.6) until streams and resources exist.
            break
        }
    }

    /// Tells a new member about the others, and the others about it (docs/PROTOCOL.md §7.4).
    private func introduceMembers(toAndAbout newLinkID: Int) {
        let state = state.value
        guard let newcomer = state.links[newLinkID], let newcomerPeer = newcomer.peer else { return }
        let others = state.activeLink.filter { $0.key != newcomerPeer.identifier }.compactMap { state.links[$0.value] }
        let entries = others.compactMap { other -> MeshIntroduction.Entry? in
            guard let peer = other.peer, let endpoint = other.listenEndpoint else { return nil }
            return MeshIntroduction.Entry(peerID: peer, endpoint: endpoint)
        }
        if let introduction = try? MeshIntroduction(entries: entries) {
            newcomer.channel?.writeAndFlush(Frame.meshIntroduction(introduction), promise: nil)
        }
        guard let endpoint = newcomer.listenEndpoint,
            let aboutNewcomer = try? MeshIntroduction(entries: [MeshIntroduction.Entry(peerID: newcomerPeer, endpoint: endpoint)])
        else { return }
        for other in others { other.channel?.writeAndFlush(Frame.meshIntroduction(aboutNewcomer), promise: nil) }
    }

    /// A connected member introduced peers; of each pair the larger identifier dials.
    private func introduced(_ introduction: MeshIntroduction, by introducer: WirePeerID) {
        let state = state.value
        let local = configuration.localPeer.identifier
        for entry in introduction.entries {
            let peer = entry.peerID.identifier
            guard peer != local, peer != introducer.identifier else { continue }
            // Recorded even when a connection to the peer is already under way: if the peer's
            // introduced dial wins the simultaneous-connect rule, it must be admitted.
            let deadline = eventLoop.now + .seconds(Int64(WireLimits.meshIntroductionLifetimeSeconds))
            // An introducer over its quota is ignored: a hostile member cannot make us dial more.
            guard state.introductions.record(peer, by: introducer.identifier, until: deadline, now: eventLoop.now) else {
                configuration.logger.notice("ignored an introduction past the introducer's quota", metadata: ["introducer": introducer.logValue])
                continue
            }
            if local > peer && state.linkIDs(for: peer).isEmpty && state.hasRoomForMember(besides: peer) {
                startDialing(DialPlan(introduced: entry.peerID, by: introducer.identifier, at: entry.endpoint))
            }
        }
    }

    /// One UDP datagram from anywhere: authenticated or dropped, never answered.
    fileprivate func datagramReceived(_ envelope: AddressedEnvelope<ByteBuffer>) {
        let state = state.value
        guard let (header, body) = try? DatagramHeader.decode(datagram: envelope.data),
            let linkID = state.receiverIDs[header.receiverID], let link = state.links[linkID],
            link.isConnected, let peer = link.peer, let kind = link.datagram?.kind
        else { return }
        // Without keys, at least insist on the peer's own address.
        if kind == .plain && envelope.remoteAddress.ipAddress != link.datagramAddress?.ipAddress { return }
        switch link.datagram?.open(header: header, body: body) {
        case .message(let message):
            // Unreliable: past the receive budget a datagram is dropped rather than held.
            guard link.receiveBudget?.hasRoom(for: message.readableBytes) ?? true else { return }
            onEvent(.messageReceived(message, from: peer, receipt: charge(link, message.readableBytes)))
        case .dropped, nil: break
        case .integrityLimitReached:
            link.channel?.triggerUserOutboundEvent(ConnectionCommand.close(.timedOut), promise: nil)
        }
    }

    fileprivate func linkClosed(_ linkID: Int, _ error: ConnectionError) {
        let state = state.value
        guard let link = state.links.removeValue(forKey: linkID) else { return }
        state.receiverIDs = state.receiverIDs.filter { $0.value != linkID }
        guard let peer = link.peer else {
            configuration.logger.debug("a connection closed before HELLO", metadata: ["reason": "\(error)", "dialed": "\(link.dialed)"])
            return
        }
        configuration.logger.info(
            link.isConnected ? "connection ended" : "connection failed",
            metadata: ["peer": peer.logValue, "reason": "\(error)", "dialed": "\(link.dialed)"])
        if state.activeLink[peer.identifier] == linkID {
            state.activeLink[peer.identifier] = nil
            state.introductions.forget(introducer: peer.identifier)
            sendBudget.remove(peer.identifier)
        }
        // A superseded duplicate, or a link whose end was already reported, goes quietly.
        guard !link.closingSilently, state.linkIDs(for: peer.identifier).isEmpty else { return }
        if let plan = link.plan, plan.purpose == .meshIntroduction, link.attempt < 3,
            error == ConnectionError(.peerSaidGoodbye(.unknownToken))
        {
            // Our introduction may have overtaken the one the introducer sent the peer: try again.
            let nextAttempt = link.attempt + 1
            eventLoop.scheduleTask(in: .milliseconds(250)) { [self] in
                let state = self.state.value
                if state.linkIDs(for: peer.identifier).isEmpty && state.hasRoomForMember(besides: peer.identifier) {
                    self.startDialing(plan, attempt: nextAttempt)
                }
            }
            return
        }
        if error == ConnectionError(.peerSaidGoodbye(.duplicateConnection)) && !link.isConnected {
            // The peer kept its own connection to us, which may not have said HELLO here yet:
            // stay "connecting" until it shows up, or until the handshake deadline passes.
            eventLoop.scheduleTask(in: configuration.handshakeTimeout) { [self] in
                if self.state.value.linkIDs(for: peer.identifier).isEmpty { self.report(peer, .notConnected(error)) }
            }
            return
        }
        report(peer, .notConnected(error))
    }

    // MARK: Helpers

    /// Counts a delivered message against the link's receive budget, pausing reads past it.
    private func charge(_ link: EngineState.Link, _ bytes: Int) -> DeliveryReceipt {
        guard let budget = link.receiveBudget else { return .none }
        if budget.charge(bytes) {
            configuration.logger.debug("receive budget full; pausing reads", metadata: ["peer": link.peer?.logValue ?? "?"])
            link.channel?.triggerUserOutboundEvent(ConnectionCommand.pauseReading, promise: nil)
        }
        return DeliveryReceipt(budget: budget, bytes: bytes)
    }

    /// Reports each change of a peer's state once.
    private func report(_ peer: WirePeerID, _ newState: PeerConnectionState) {
        let state = state.value
        let previous = state.reported[peer.identifier]?.state ?? .notConnected(nil)
        switch (previous, newState) {
        case (.notConnected, .notConnected), (.connecting, .connecting), (.connected, .connected), (.connected, .connecting):
            return
        default:
            break
        }
        if case .notConnected = newState {
            state.reported[peer.identifier] = nil
        } else {
            state.reported[peer.identifier] = EngineState.Reported(peer: peer, state: newState)
        }
        onEvent(.peerStateChanged(peer, newState))
    }

    private func advertisedEndpoints(port: Int) throws -> [WireEndpoint] {
        guard port > 0, port <= Int(UInt16.max) else { throw WireError(.invalidValue, "listener port \(port)") }
        let hosts: [String]
        if let advertised = configuration.advertisedAddresses {
            hosts = advertised
        } else if configuration.listenHost == "0.0.0.0" || configuration.listenHost == "::" {
            let devices = (try? System.enumerateDevices()) ?? []
            let addresses = devices.compactMap { $0.address?.ipAddress }.filter { !$0.hasPrefix("fe80") }
            // Routable addresses first; loopback last, so a peer on this machine still finds us.
            hosts = addresses.filter { $0 != "127.0.0.1" && $0 != "::1" } + addresses.filter { $0 == "127.0.0.1" || $0 == "::1" }
        } else {
            hosts = [configuration.listenHost]
        }
        let endpoints = try hosts.compactMap { host -> WireEndpoint? in
            guard let address = try? SocketAddress(ipAddress: host, port: port) else { return nil }
            return try WireEndpoint(socketAddress: address)
        }
        guard !endpoints.isEmpty else { throw WireError(.invalidValue, "no address to advertise") }
        return Array(endpoints.prefix(WireLimits.maxConnectionDataEndpoints))
    }
}

/// Connects a channel's connection events to the engine.
private final class LinkHandler: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    /// Weak: the engine owns its connections, not the other way round.
    weak var engine: SessionEngine?
    let linkID: Int

    init(engine: SessionEngine, linkID: Int) {
        self.engine = engine
        self.linkID = linkID
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let engine else { return }
        switch unwrapInboundIn(data) {
        case .established(let connection):
            let tls = try? context.pipeline.syncOperations.handler(type: ConnectionHandler.self).tlsEngine
            engine.linkEstablished(linkID, connection, tls: tls, remote: context.channel.remoteAddress)
        case .frame(let frame): engine.linkReceived(linkID, frame)
        case .closed(let error): engine.linkClosed(linkID, error)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { engine?.linkWritable(linkID) }
        context.fireChannelWritabilityChanged()
    }
}

/// Whom a dialed link expects to reach, and how it introduces itself.
struct DialPlan: Sendable {
    let peer: WirePeerID
    let purpose: Hello.Purpose
    let token: Bytes16
    /// The leaf certificate the peer must show, when its connection data named one.
    let fingerprint: SHA256Digest?
    let endpoints: [WireEndpoint]

    init(_ data: ConnectionData) {
        peer = data.peerID
        purpose = .connectionData
        token = data.token
        fingerprint = data.certificateFingerprint
        endpoints = data.endpoints
    }

    init(introduced peer: WirePeerID, by introducer: Bytes16, at endpoint: WireEndpoint) {
        self.peer = peer
        purpose = .meshIntroduction
        token = introducer
        fingerprint = nil
        endpoints = [endpoint]
    }
}

/// Hands every UDP datagram to the engine.
private final class DatagramInboundHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var engine: SessionEngine?

    init(engine: SessionEngine) { self.engine = engine }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        engine?.datagramReceived(unwrapInboundIn(data))
    }
}

/// The engine's mutable state; only touched on the engine's event loop.
final class EngineState {
    /// A class, so that reading or updating a link in the dictionary never copies its assembler
    /// or replay windows.
    final class Link {
        var dialed: Bool
        var channel: (any Channel)?
        var peer: WirePeerID?
        var plan: DialPlan?
        var attempt = 0
        var isConnected = false
        /// Where the peer accepts connections, for introducing it to others.
        var listenEndpoint: WireEndpoint?
        /// Set when its end must not be reported (a superseded duplicate, a disconnect).
        var closingSilently = false
        var assembler = MessageAssembler()
        /// The connection's handler, for its handshake progress when connections must be shed.
        weak var handler: ConnectionHandler?
        /// Reliable frames waiting for the socket to take them (bounded by the send budget).
        var outbound = CircularBuffer<Frame>()
        var pumping = false
        var receiveBudget: ReceiveBudget?
        var datagram: DatagramPeerState?
        var datagramAddress: SocketAddress?

        init(dialed: Bool, channel: (any Channel)? = nil, peer: WirePeerID? = nil, plan: DialPlan? = nil) {
            self.dialed = dialed
            self.channel = channel
            self.peer = peer
            self.plan = plan
        }
    }

    struct Token {
        let forPeer: Bytes16
        let expires: NIODeadline
    }

    struct Reported {
        let peer: WirePeerID
        let state: PeerConnectionState
    }

    var links: [Int: Link] = [:]
    var activeLink: [Bytes16: Int] = [:]
    var tokens: [Bytes16: Token] = [:]
    var introductions = IntroductionLedger()
    var reported: [Bytes16: Reported] = [:]
    var listener: (any Channel)?
    var listenPort: Int?
    var listening: EventLoopFuture<Int>?
    var datagramChannel: (any Channel)?
    var datagramPort: Int?
    /// Our receiver IDs, one per link, as HELLO announced them.
    var receiverIDs: [UInt32: Int] = [:]

    func allocateReceiverID(for linkID: Int) -> UInt32 {
        var generator = SystemRandomNumberGenerator()
        while true {
            let candidate = UInt32.random(in: 1 ... .max, using: &generator)
            if receiverIDs[candidate] == nil {
                receiverIDs[candidate] = linkID
                return candidate
            }
        }
    }
    private var nextLinkID = 1

    func addLink(_ link: Link) -> Int {
        defer { nextLinkID += 1 }
        links[nextLinkID] = link
        return nextLinkID
    }

    /// Inbound connections accepted but not yet connected.
    var pendingInboundCount: Int { links.values.filter { !$0.dialed && !$0.isConnected }.count }

    func linkIDs(for peer: Bytes16) -> [Int] {
        links.filter { $0.value.peer?.identifier == peer }.map(\.key)
    }

    func expireTokens(now: NIODeadline) {
        tokens = tokens.filter { $0.value.expires > now }
        introductions.expire(now: now)
    }

    /// Whether one more peer fits in the session: every peer with a link counts, connected or
    /// not, so the member limit holds on every path (connection data, introductions, retries).
    func hasRoomForMember(besides peer: Bytes16) -> Bool {
        var others = Set<Bytes16>()
        for link in links.values {
            if let other = link.peer?.identifier, other != peer { others.insert(other) }
        }
        return others.count < WireLimits.maxSessionMembers - 1
    }
}

extension WireEndpoint {
    init(socketAddress: SocketAddress) throws(WireError) {
        guard let port = socketAddress.port, let port16 = UInt16(exactly: port) else {
            throw WireError(.invalidValue, "socket address without a port")
        }
        switch socketAddress {
        case .v4(let address):
            try self.init(address: .ipv4(UInt32(bigEndian: address.address.sin_addr.s_addr)), port: port16)
        case .v6(let address):
            let bytes = withUnsafeBytes(of: address.address.sin6_addr) { Array($0) }
            try self.init(address: .ipv6(Bytes16(bytes: bytes)!), port: port16)
        case .unixDomainSocket:
            throw WireError(.invalidValue, "unix domain sockets have no IP endpoint")
        }
    }

    func socketAddress() throws -> SocketAddress {
        switch address {
        case .ipv4(let value):
            let octets = (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32($0)))) }
            return try SocketAddress(ipAddress: octets.joined(separator: "."), port: Int(port))
        case .ipv6(let value):
            var storage = in6_addr()
            withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: value.bytes) }
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(port).bigEndian
            address.sin6_addr = storage
            return SocketAddress(address, host: "")
        }
    }
}

extension WirePeerID {
    /// How logs name a peer: its display name and the first bytes of its identifier.
    var logValue: Logger.MetadataValue {
        .string("\(displayName) [\(identifier.bytes.prefix(4).map { String(format: "%02x", $0) }.joined())]")
    }
}
