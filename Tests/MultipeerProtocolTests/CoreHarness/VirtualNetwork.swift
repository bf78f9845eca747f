import Logging
import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore

@testable import MultipeerProtocol
import ProtocolTestSupport

/// Session cores run against each other on a virtual clock, with no sockets (in the spirit of
/// quinn-proto's and swift-nio-ssl's back-to-back tests). Between two cores, each link is a pair
/// of real `ConnectionStateMachine`s (real TLS, real HELLO and trust step) whose bytes the network
/// moves after a per-direction latency. Nodes are addressed 10.0.0.x, a name only: nothing leaves
/// the process. Everything is single-threaded and ordered by (time, insertion), and the cores'
/// randomness is seeded, so a run is a function of its seed and script.
final class VirtualNetwork {
    private(set) var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
    private var queue: [(time: NIODeadline, sequence: Int, work: () -> Void)] = []
    private var sequence = 0
    private var random: SeededGenerator
    private(set) var nodes: [Node] = []
    /// One-way latency between two nodes, by their indices; `defaultLatency` when not set.
    var latency: [Pair: TimeAmount] = [:]
    var defaultLatency = TimeAmount.milliseconds(2)
    /// Addresses where a dial's SYN is lost (a host that moved away from a link that drops what
    /// is sent to it): a dial that reaches no node but names one of them times out instead of
    /// being refused at once.
    var silentAddresses: Set<UInt32> = []
    let handshakeTimeout = TimeAmount.seconds(10)
    let trustTimeout = TimeAmount.seconds(30)
    let keepalive = KeepalivePolicy()
    /// The interface every established connection reports for its peer's address, as an IPv6
    /// link-local one would have (nil: none).
    var remoteScope: UInt32?

    struct Pair: Hashable {
        let from: Int
        let to: Int
    }

    init(seed: UInt64) {
        random = SeededGenerator(seed: seed)
    }

    // MARK: Nodes

    final class Node {
        let index: Int
        let peer: WirePeerID
        let core: SessionCore
        let tls: TLSContext
        let preference: WireEncryptionPreference
        /// The app's answer to a trust request; nil never answers (the trust timeout decides).
        var trustPolicy: ((PeerTrustRequest) -> Bool)? = { _ in true }
        /// False: every byte and datagram to or from this node is lost (a dead or unplugged peer).
        var isReachable = true
        /// False: dials to this node find nothing listening (a transient failure; compare
        /// `acceptsConnections`, which the node announces).
        var isListening = true
        /// False: the node has no listener at all and says so (HELLO listenPort 0).
        let acceptsConnections: Bool
        fileprivate(set) var reports: [(peer: WirePeerID, state: PeerConnectionState)] = []
        fileprivate(set) var refusals: [(peer: WirePeerID, reason: GoodbyeReason)] = []
        fileprivate(set) var messages: [(from: Bytes16, message: ByteBuffer)] = []
        fileprivate(set) var members: Set<Bytes16> = []
        /// Members whose link was lost and which are recovering (docs/PROTOCOL.md §7.9).
        fileprivate(set) var suspended: Set<Bytes16> = []
        /// How many times each member was resumed, and the messages resent each time.
        fileprivate(set) var resumptions: [(peer: Bytes16, resent: Int)] = []
        /// Send budget given back by acknowledgements.
        fileprivate(set) var acknowledgedCharge = 0
        /// The highest protocol version the node offers.
        var maxProtocolVersion = WireLimits.protocolVersion
        fileprivate(set) var dials: [DialPlan] = []
        /// When each of `dials` was made.
        fileprivate(set) var dialTimes: [NIODeadline] = []
        /// How late each timer fires (a loop busy with other work).
        var timerLateness: (SessionTimer) -> TimeAmount = { _ in .zero }
        fileprivate var connections: [LinkID: Connection] = [:]
        /// Streams and resources (VirtualNetwork+Channels).
        let channels = NodeChannels()
        /// The node's advertiser, while it advertises (VirtualNetwork+Invitations).
        var invitations: AdvertiserSide?
        /// How each invitation this node sent ended, in order.
        var invitationOutcomes: [(peer: WirePeerID, outcome: InvitationOutcome)] = []
        /// The advertiser's listener has no session yet: an ephemeral certificate (§7.2).
        lazy var advertiserTLS = try! TLSContext(identity: nil)

        /// 10.0.0.x until the node moves (`move`), then 10.0.m.x.
        private(set) var address: UInt32
        var host: String { "10.0.\((address >> 8) & 0xFF).\(address & 0xFF)" }
        var listenPort: UInt16 { acceptsConnections ? 7000 : 0 }
        var datagramPort: UInt16 { 9000 }
        /// Where the node listens, or would if it accepted connections.
        var endpoint: WireEndpoint { try! WireEndpoint(address: .ipv4(address), port: 7000) }

        /// The node gets a new address: dials to the old one find nothing, and its connections
        /// are lost (call `resetConnections` too, or let the deadlines find out).
        func move() { address += 0x100 }

        init(
            index: Int, peer: WirePeerID, core: SessionCore, tls: TLSContext, preference: WireEncryptionPreference,
            acceptsConnections: Bool
        ) {
            self.acceptsConnections = acceptsConnections
            self.index = index
            address = 0x0A00_0001 + UInt32(index)
            self.peer = peer
            self.core = core
            self.tls = tls
            self.preference = preference
        }

        /// Every state reported for `other`, in order.
        func states(of other: Node) -> [PeerConnectionState] {
            reports.filter { $0.peer.identifier == other.peer.identifier }.map(\.state)
        }

        func lastState(of other: Node) -> PeerConnectionState? { states(of: other).last }

        func isConnected(to other: Node) -> Bool { lastState(of: other) == .connected }

        /// Whether the one connection this node holds open is one it dialed; nil unless it holds one.
        var openConnectionDialedHere: Bool? {
            let open = connections.values.filter { !$0.isClosed }
            return open.count == 1 ? open[0].dialPlan != nil : nil
        }

        func connection(_ id: LinkID) -> Connection? { connections[id] }

        /// Open connections whose other end is `other`.
        func openConnectionsTo(_ other: Node) -> [Connection] {
            connections.values.filter { !$0.isClosed && $0.remote?.node === other }
        }

        /// The channel drivers of the node's open, established connections.
        var openChannelDrivers: [ChannelDriver] { connections.values.filter { !$0.isClosed }.compactMap(\.channels) }

        /// Connections this node holds open, connected or not.
        var openConnections: Int { connections.values.filter { !$0.isClosed }.count }
    }

    /// Adds a node with a fresh identity (or none, for preference `.none`).
    @discardableResult
    func addNode(
        _ name: String, preference: WireEncryptionPreference = .required, identity: SecurityIdentity? = nil,
        acceptsConnections: Bool = true, identifier: Bytes16? = nil, maxProtocolVersion: UInt8 = WireLimits.protocolVersion,
        recovery: RecoveryPolicy = .off
    ) throws -> Node {
        var identifierBytes = [UInt8](repeating: 0, count: 16)
        for index in identifierBytes.indices { identifierBytes[index] = UInt8.random(in: 0...255, using: &random) }
        let peer = try WirePeerID(identifier: identifier ?? Bytes16(bytes: identifierBytes)!, displayName: name)
        let logger = Logger(label: "VirtualNetwork", factory: { _ in SwiftLogNoOpLogHandler() })
        let core = SessionCore(
            configuration: SessionCoreConfiguration(
                localPeer: peer, handshakeTimeout: handshakeTimeout, maximumPendingConnections: 64, maximumPendingConnectionsPerSource: 64,
                datagramLimits: .init(), channelLimits: Self.channelLimits, logger: logger, acceptsConnections: acceptsConnections,
                recovery: recovery),
            random: SeededGenerator(seed: random.next()))
        let node = Node(
            index: nodes.count, peer: peer, core: core, tls: try TLSContext(identity: identity), preference: preference,
            acceptsConnections: acceptsConnections)
        node.maxProtocolVersion = maxProtocolVersion
        nodes.append(node)
        return node
    }

    // MARK: Commands, as an app would issue them

    /// The connection data `maker` would hand `dialer`.
    func connectionData(from maker: Node, for dialer: Node) throws -> ConnectionData {
        let token = maker.core.issueToken(forPeer: dialer.peer.identifier, now: now)
        return try ConnectionData(
            encryptionPreference: maker.preference, token: token, forPeer: dialer.peer.identifier, peerID: maker.peer,
            certificateFingerprint: try maker.tls.identity.map { try SHA256Digest(bytes: $0.certificate.sha256Fingerprint) },
            endpoints: [maker.endpoint])
    }

    /// `dialer` dials `maker` with connection data made for it (now, or after `delay`).
    func connect(_ dialer: Node, to maker: Node, after delay: TimeAmount = .zero) throws {
        let data = try connectionData(from: maker, for: dialer)
        connect(dialer, with: data, after: delay)
    }

    func connect(_ dialer: Node, with data: ConnectionData, after delay: TimeAmount = .zero) {
        schedule(after: delay) {
            dialer.core.connect(DialPlan(data))
            self.drain(dialer)
        }
    }

    func cancelConnect(_ node: Node, peer: Node) {
        node.core.cancelConnect(peer: peer.peer.identifier)
        drain(node)
    }

    func disconnect(_ node: Node) {
        node.core.disconnect()
        drain(node)
    }

    /// A reliable message, sent as the shell sends it; false when `to` is not a member of
    /// `from`'s session. A suspended member keeps it for its next link.
    @discardableResult
    func send(_ text: String, from: Node, to: Node) -> Bool {
        let message = ByteBuffer(string: text)
        let (id, kept) = from.core.sendingReliable(message, to: to.peer.identifier)
        guard let id, let connection = from.connections[id] else { return kept }
        for frame in try! Frame.messageFragments(of: message) { connection.send(frame) }
        return true
    }

    /// The TCP connection between `a` and `b` is reset: both ends see it close at once, with no
    /// GOODBYE (a NAT or a router dropping it).
    func resetConnection(between a: Node, and b: Node) {
        for connection in a.openConnectionsTo(b) {
            connection.remote?.vanish()
            connection.vanish()
        }
    }

    /// Any frame, as a (possibly hostile) peer's connection would send it on `link`.
    func send(frame: Frame, from node: Node, on link: LinkID) {
        node.connections[link]?.send(frame)
    }

    /// Seals a datagram as `from` would send it to `to`; deliver it with `deliverDatagram`.
    func sealDatagram(_ text: String, from: Node, to: Node) -> (ByteBuffer, SocketAddress)? {
        from.core.sealDatagram(ByteBuffer(string: text), to: to.peer.identifier)
    }

    /// A datagram arrives at `node` from `source` (any address: an attacker can send from anywhere).
    func deliverDatagram(_ datagram: ByteBuffer, to node: Node, from source: SocketAddress) {
        schedule(after: defaultLatency) {
            guard node.isReachable, let (message, peer, _) = node.core.datagramReceived(datagram, from: source) else {
                self.drain(node)
                return
            }
            node.messages.append((peer.identifier, message))
            self.drain(node)
        }
    }

    func datagramAddress(of node: Node) -> SocketAddress {
        try! SocketAddress(ipAddress: node.host, port: Int(node.datagramPort))
    }

    // MARK: Running

    func schedule(after delay: TimeAmount, _ work: @escaping () -> Void) {
        schedule(at: now + delay, work)
    }

    func schedule(at time: NIODeadline, _ work: @escaping () -> Void) {
        sequence += 1
        let item = (time: max(time, now), sequence: sequence, work: work)
        let position = queue.firstIndex { ($0.time, $0.sequence) > (item.time, item.sequence) } ?? queue.endIndex
        queue.insert(item, at: position)
    }

    /// Runs everything due within `duration` of virtual time; the clock ends at now + duration.
    func run(for duration: TimeAmount) {
        let end = now + duration
        while let first = queue.first, first.time <= end {
            queue.removeFirst()
            now = first.time
            first.work()
        }
        now = end
    }

    /// Runs until `condition` holds, checking after every event, for at most `limit` of virtual time.
    @discardableResult
    func run(until condition: () -> Bool, limit: TimeAmount = .seconds(60)) -> Bool {
        let end = now + limit
        while !condition() {
            guard let first = queue.first, first.time <= end else {
                now = end
                return condition()
            }
            queue.removeFirst()
            now = first.time
            first.work()
        }
        return true
    }

    func latency(from: Node, to: Node) -> TimeAmount {
        latency[Pair(from: from.index, to: to.index)] ?? defaultLatency
    }

    // MARK: The shell: carrying out a core's actions

    func drain(_ node: Node) {
        node.core.forEachAction { action in
            switch action {
            case .dial(let id, let plan):
                node.dials.append(plan)
                node.dialTimes.append(now)
                let connection = Connection(network: self, node: node, link: id, dialPlan: plan)
                node.connections[id] = connection
                // The TCP connection completes (or fails) one latency later.
                let target = self.target(of: plan)
                schedule(after: target.map { latency(from: node, to: $0) } ?? defaultLatency) { self.completeDial(connection, plan: plan) }
            case .sendFrame(let frame, let id):
                node.connections[id]?.send(frame)
            case .close(let id, let reason):
                node.connections[id]?.command { $0.disconnect(reason: reason) }
            case .abort(let id, let error):
                node.connections[id]?.command { $0.abort(error) }
            case .drop(let id):
                // The socket closes: our side says GOODBYE if it can, as a channel close does.
                node.connections[id]?.command { $0.disconnect() }
                node.connections[id]?.closeTransport()
            case .sever(let id):
                node.connections[id]?.closeTransport()
            case .report(let peer, let state):
                node.reports.append((peer, state))
            case .refused(let peer, let reason):
                node.refusals.append((peer, reason))
            case .memberJoined(let peer, _, _):
                node.members.insert(peer.identifier)
            case .memberLeft(let peer):
                node.members.remove(peer)
                node.suspended.remove(peer)
            case .memberSuspended(let peer):
                node.suspended.insert(peer.identifier)
            case .memberResumed(let peer, let id, _, let resend):
                node.suspended.remove(peer.identifier)
                node.resumptions.append((peer.identifier, resend.count))
                for message in resend {
                    for frame in try! Frame.messageFragments(of: message) { node.connections[id]?.send(frame) }
                }
            case .acknowledged(_, let charge):
                node.acknowledgedCharge += charge
            case .schedule(let timer, let deadline):
                schedule(at: deadline + node.timerLateness(timer)) {
                    node.core.timerFired(timer, now: self.now)
                    self.drain(node)
                }
            }
        }
    }

    /// The node a dial reaches: at the first of the plan's endpoints where one is (the shell
    /// tries them in order; one where nobody is never answers in time to win).
    private func target(of plan: DialPlan) -> Node? {
        for endpoint in plan.endpoints {
            if let node = nodes.first(where: { $0.endpoint == endpoint }) { return node }
        }
        return nil
    }

    /// The dial's SYNs get no answer: it fails at its connect deadline, unless let go before.
    private func timeOut(_ dialer: Connection, plan: DialPlan) {
        let node = dialer.node
        schedule(after: plan.connectTimeout ?? handshakeTimeout) {
            guard node.core.isLive(dialer.link), !dialer.isClosed else { return }
            dialer.isClosed = true
            node.core.dialFailed(dialer.link)
            self.drain(node)
        }
    }

    private func completeDial(_ dialer: Connection, plan: DialPlan) {
        let node = dialer.node
        guard node.core.isLive(dialer.link), !dialer.isClosed else { return }
        let target = target(of: plan)
        let silent = plan.endpoints.contains { endpoint in
            if case .ipv4(let address) = endpoint.address { silentAddresses.contains(address) } else { false }
        }
        guard let target, target.isListening, target.acceptsConnections else {
            if target == nil && silent { return timeOut(dialer, plan: plan) }
            // Connection refused: nobody listens there.
            dialer.isClosed = true
            node.core.dialFailed(dialer.link)
            drain(node)
            return
        }
        // The SYN is lost: the connect times out.
        guard node.isReachable && target.isReachable else { return timeOut(dialer, plan: plan) }
        let (listenerLink, shed) = target.core.inboundAccepted(from: PendingSource(nil)) { id in
            PendingProgress(
                stage: target.connections[id]?.machine.establishmentProgress ?? 0, lastActivity: target.connections[id]?.lastActivity ?? .distantPast)
        }
        if let shed { target.connections[shed]?.closeTransport() }
        node.core.dialConnected(dialer.link, at: target.endpoint)
        let listener = Connection(network: self, node: target, link: listenerLink, dialPlan: nil)
        target.connections[listenerLink] = listener
        dialer.remote = listener
        listener.remote = dialer
        dialer.start()
        listener.start()
    }
}

/// One end of a simulated TCP connection: a real connection state machine, and the timers the
/// NIO shell (ConnectionHandler) runs for it, on the virtual clock.
final class Connection {
    unowned let network: VirtualNetwork
    let node: VirtualNetwork.Node
    let link: LinkID
    let dialPlan: DialPlan?
    private(set) var machine: ConnectionStateMachine!
    weak var remote: Connection?
    /// The transport is closed (or the dial abandoned).
    var isClosed = false
    private var endReported = false
    private var isEstablished = false
    private(set) var lastActivity: NIODeadline
    private var keepalive: KeepaliveClock?
    /// Bumped to cancel the pending handshake or trust deadline.
    private var deadlineGeneration = 0
    /// Streams and resources, once established (VirtualNetwork+Channels).
    private(set) var channels: ChannelDriver?
    private(set) var peerIdentifier: Bytes16?

    init(network: VirtualNetwork, node: VirtualNetwork.Node, link: LinkID, dialPlan: DialPlan?) {
        self.network = network
        self.node = node
        self.link = link
        self.dialPlan = dialPlan
        lastActivity = network.now
    }

    func start() {
        let core = node.core
        let link = link
        let configuration = ConnectionConfiguration(
            role: dialPlan == nil ? .listener : .dialer, localPeer: node.peer, encryptionPreference: node.preference,
            tls: node.tls, purpose: dialPlan?.purpose ?? .answer, token: dialPlan?.token ?? .zero,
            listenPort: node.listenPort, datagramPort: node.datagramPort,
            datagramReceiverID: core.allocateReceiverID(for: link),
            expectedPeer: dialPlan?.peer.identifier, expectedCertificateFingerprint: dialPlan?.fingerprint,
            resumption: dialPlan?.resumption)
        var versioned = configuration
        versioned.maxProtocolVersion = node.maxProtocolVersion
        machine = try! ConnectionStateMachine(configuration: versioned)
        armDeadline(after: dialPlan?.handshakeTimeout ?? network.handshakeTimeout)
        perform(machine.start())
    }

    func send(_ frame: Frame) {
        guard machine != nil, let actions = try? machine.send(frame) else { return }
        perform(actions)
    }

    /// A frame the core decided to send: the connection refusing it is a bug, recorded.
    func sendChecked(_ frame: Frame) {
        guard machine != nil, !isClosed else { return }
        do {
            perform(try machine.send(frame))
        } catch .notConnected {
            return  // closing: as the shell, nothing goes out
        } catch {
            node.channels.refusals.append(error)
        }
    }

    func command(_ body: (inout ConnectionStateMachine) -> [ConnectionAction]) {
        guard machine != nil else {
            // Still connecting: the dial is abandoned.
            isClosed = true
            return
        }
        perform(body(&machine))
    }

    /// The socket closes under us; the peer sees the transport end, unless one of us is unreachable.
    func closeTransport() {
        guard !isClosed else { return }
        isClosed = true
        deadlineGeneration += 1
        if machine != nil { report(machine.transportClosed()) }
        guard let remote, node.isReachable else { return }
        network.schedule(after: network.latency(from: node, to: remote.node)) { [weak remote] in
            guard let remote, remote.node.isReachable else { return }
            remote.transportEnded()
        }
    }

    /// The transport ends here, as a reset would end it: the machine learns, the peer's bytes
    /// in flight are lost.
    func vanish() {
        guard !isClosed else { return }
        isClosed = true
        deadlineGeneration += 1
        if machine != nil { report(machine.transportClosed()) }
    }

    private func transportEnded() {
        guard !isClosed, machine != nil else { return }
        isClosed = true
        deadlineGeneration += 1
        report(machine.transportClosed())
    }

    private func receive(_ bytes: ByteBuffer) {
        guard !isClosed, node.isReachable else { return }
        lastActivity = network.now
        keepalive?.received(at: network.now)
        perform(machine.receive(bytes))
    }

    /// Carries out the machine's actions as ConnectionHandler does.
    private func perform(_ actions: [ConnectionAction]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                guard let remote, node.isReachable, !isClosed else { continue }
                network.schedule(after: network.latency(from: node, to: remote.node)) { [weak remote] in
                    guard let remote, remote.node.isReachable else { return }
                    remote.receive(bytes)
                }
            case .evaluateTrust(let request):
                deadlineGeneration += 1
                let ask = node.core.trustRequested(request, on: link)
                network.drain(node)
                if !ask {
                    answerTrust(false)
                } else if let policy = node.trustPolicy {
                    let accepted = policy(request)
                    network.schedule(after: .milliseconds(1)) { self.answerTrust(accepted) }
                } else {
                    let generation = deadlineGeneration
                    network.schedule(after: network.trustTimeout) {
                        guard generation == self.deadlineGeneration else { return }
                        self.perform(self.machine.trustTimedOut())
                    }
                }
            case .established(let connection):
                deadlineGeneration += 1
                isEstablished = true
                let tls = machine.tlsEngine
                peerIdentifier = connection.peer.identifier
                node.core.established(
                    connection, on: link, remoteHost: remote?.node.host, remoteScope: network.remoteScope, localHost: node.host
                ) { direction, epoch in
                    try? tls?.exportKeyingMaterial(
                        label: direction.exporterLabel, context: DatagramDirection.exporterContext(epoch: epoch),
                        length: DatagramCipher.keyLength)
                }
                // After the core made the link a member's, with its ChannelMux.
                channels = ChannelDriver(connection: self)
                network.drain(node)
                keepalive = KeepaliveClock(policy: network.keepalive, now: network.now)
                scheduleKeepaliveTick()
            case .deliver(let frame) where frame.type.isChannelFrame:
                channels?.peerSent(frame)
            case .deliver(let frame):
                if let (message, peer) = node.core.received(frame, on: link, now: network.now) {
                    node.messages.append((peer.identifier, message))
                }
                network.drain(node)
            case .close(let error):
                report([.close(error)])
                closeTransport()
            case .admissionRequested(let hello):
                // As the shell does, the core's other actions (closing a superseded dial) run at once;
                // they touch other connections, never this one's machine.
                let admission = node.core.admit(
                    hello, peerCertificate: machine.admittingPeerCertificateFingerprint, on: link, now: network.now)
                network.drain(node)
                perform(machine.admitted(admission))
            case .invitationReceived, .awaitingInvitationAnswer, .invitationAnswered:
                break  // sessions never carry invitation connections (their admission refuses purpose 2)
            }
        }
    }

    /// The connection ended: the core learns why, once.
    private func report(_ actions: [ConnectionAction]) {
        for case .close(let error) in actions where !endReported {
            endReported = true
            channels?.connectionLost()
            node.core.closed(link, error, now: network.now)
            network.drain(node)
        }
    }

    private func answerTrust(_ accepted: Bool) {
        guard !isClosed else { return }
        perform(machine.trustDecided(accepted: accepted))
        if !machine.isConnected && !machine.isClosed { armDeadline(after: network.trustTimeout + network.handshakeTimeout) }
    }

    private func armDeadline(after timeout: TimeAmount) {
        deadlineGeneration += 1
        let generation = deadlineGeneration
        network.schedule(after: timeout) {
            guard generation == self.deadlineGeneration, !self.isClosed else { return }
            self.perform(self.machine.handshakeTimedOut())
        }
    }

    private func scheduleKeepaliveTick() {
        network.schedule(after: network.keepalive.tick) {
            guard !self.isClosed, var clock = self.keepalive else { return }
            let due = clock.tick(now: self.network.now, readsHeld: false)
            self.keepalive = clock
            switch due {
            case .peerDead: self.perform(self.machine.peerUnresponsive())
            case .ping: self.send(.ping(UInt64(self.network.now.uptimeNanoseconds)))
            case .nothing: break
            }
            self.scheduleKeepaliveTick()
        }
    }
}
