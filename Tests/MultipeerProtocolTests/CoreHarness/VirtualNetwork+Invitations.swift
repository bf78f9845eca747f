import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore

@testable import MultipeerProtocol
import ProtocolTestSupport
import Testing

/// Invitations on the virtual network (docs/PROTOCOL.md §7.2): an inviter's `Inviter` core
/// dials an advertiser's invitation port; the advertiser's `Advertiser` core and its app answer;
/// an acceptance makes the inviter's session core dial the invitee's. Between them run real
/// connection state machines with purpose 2, and the deadlines the NIO shells run.
extension VirtualNetwork {
    /// How an advertiser's application answers an invitation.
    enum AppAnswer {
        /// Accept into the node's own session, after this long.
        case accept(after: TimeAmount = .milliseconds(5))
        case decline(after: TimeAmount = .milliseconds(5))
        /// Never answer: the invitation's deadline decides.
        case never
    }

    /// Starts advertising on `node`: invitations reach its `Advertiser` core and `policy`.
    func advertise(_ node: Node, policy: @escaping (InvitationRequest) -> AppAnswer = { _ in .accept() }) {
        node.invitations = AdvertiserSide(policy: policy)
    }

    /// `inviter` invites `invitee` into its session, trying `addresses` in order (the invitee's
    /// invitation endpoint when nil). The outcome lands in `inviter.invitationOutcomes`.
    func invite(
        _ invitee: Node, from inviter: Node, timeout: TimeAmount = .seconds(30), addresses: [WireEndpoint]? = nil,
        displayName: String? = nil
    ) {
        let run = InvitationRun(
            network: self, node: inviter, invitee: invitee.peer, addresses: addresses ?? [invitee.invitationEndpoint],
            invitation: try! Invitation(timeoutMilliseconds: UInt32(timeout.nanoseconds / 1_000_000), context: ByteBuffer()),
            displayName: displayName)
        run.perform { $0.start() }
    }

    fileprivate func advertiserActions(_ node: Node, _ actions: [Advertiser<Int>.Action]) {
        guard let side = node.invitations else { return }
        for action in actions {
            switch action {
            case .close(let id):
                side.ends[id]?.closeTransport()
            case .askApplication(let id):
                guard let end = side.ends[id], let request = end.request else { continue }
                side.asked.append(request)
                switch side.policy(request) {
                case .never: break
                case .decline(let delay):
                    schedule(after: delay) { self.advertiserActions(node, side.core.appAnswered(id, accept: false, into: nil)) }
                case .accept(let delay):
                    schedule(after: delay) {
                        let session = InvitingSession(
                            members: node.members.count,
                            preamble: try! Preamble(encryptionPreference: node.preference, hasIdentity: node.tls.identity != nil))
                        self.advertiserActions(node, side.core.appAnswered(id, accept: true, into: session))
                    }
                }
            case .makeConnectionData(let id, let inviter):
                let token = node.core.issueToken(forPeer: inviter.identifier, now: now)
                let data = try? ConnectionData(
                    encryptionPreference: node.preference, token: token, forPeer: inviter.identifier, peerID: node.peer,
                    certificateFingerprint: try node.tls.identity.map { try SHA256Digest(bytes: $0.certificate.sha256Fingerprint) },
                    endpoints: [node.endpoint])
                advertiserActions(node, side.core.connectionDataMade(id, data))
            case .answer(let id, let answer):
                side.answers.append(answer.response)
                side.ends[id]?.command { $0.answerInvitation(side.tamper?(answer) ?? answer) }
            }
        }
    }

    /// A dial to `endpoint` from `inviter`'s invitation run: it connects one latency later if an
    /// advertising node is there, and fails otherwise.
    fileprivate func dialInvitation(from run: InvitationRun, to endpoint: WireEndpoint, invitation: Invitation) {
        let inviter = run.node
        let target = nodes.first { $0.invitationEndpoint == endpoint }
        schedule(after: target.map { latency(from: inviter, to: $0) } ?? defaultLatency) {
            guard let target, let side = target.invitations, target.isReachable, inviter.isReachable else {
                run.perform { $0.dialFailed("nothing listens at \(endpoint)") }
                return
            }
            side.nextID += 1
            let id = side.nextID
            let dialer = InvitationEnd(network: self, node: inviter, role: .dialer(run))
            let listener = InvitationEnd(network: self, node: target, role: .listener(id))
            side.ends[id] = listener
            dialer.remote = listener
            listener.remote = dialer
            run.perform { $0.connectionOpened() }
            let source = PendingSource(try! SocketAddress(ipAddress: inviter.host, port: 50_000))
            self.advertiserActions(target, side.core.accepted(id, from: source) { id in
                PendingProgress(stage: side.ends[id]?.progress ?? 0, lastActivity: side.ends[id]?.lastActivity ?? .distantPast)
            })
            dialer.start(invitation: invitation, displayName: run.displayName)
            listener.start(invitation: nil, displayName: nil)
        }
    }
}

extension VirtualNetwork.Node {
    /// Where the node's advertiser listens for invitations.
    var invitationEndpoint: WireEndpoint { try! WireEndpoint(address: .ipv4(0x0A00_0001 + UInt32(index)), port: 7001) }
}

/// An advertising node's invitation listener: its core, its connections and what it did.
final class AdvertiserSide {
    var core = Advertiser<Int>()
    let policy: (InvitationRequest) -> VirtualNetwork.AppAnswer
    fileprivate var ends: [Int: InvitationEnd] = [:]
    fileprivate var nextID = 0
    /// Invitations the application was asked about, in order.
    fileprivate(set) var asked: [InvitationRequest] = []
    /// Answers the core decided, in order.
    fileprivate(set) var answers: [InvitationResponse] = []
    /// A hostile advertiser rewrites its answer on the wire.
    var tamper: ((InvitationAnswer) -> InvitationAnswer)?
    /// Invitation connections open now.
    var openConnections: Int { ends.values.filter { !$0.isClosed }.count }

    init(policy: @escaping (InvitationRequest) -> VirtualNetwork.AppAnswer) { self.policy = policy }
}

/// One invitation from a node: its `Inviter` core and the actions carried out for it.
final class InvitationRun {
    unowned let network: VirtualNetwork
    let node: VirtualNetwork.Node
    let displayName: String?
    private var inviter: Inviter
    private let addresses: [WireEndpoint]
    private let invitation: Invitation

    init(network: VirtualNetwork, node: VirtualNetwork.Node, invitee: WirePeerID, addresses: [WireEndpoint], invitation: Invitation, displayName: String?) {
        self.network = network
        self.node = node
        self.displayName = displayName
        self.addresses = addresses
        self.invitation = invitation
        inviter = Inviter(invitee: invitee, localPeer: node.peer.identifier, addressCount: addresses.count)
    }

    var invitee: WirePeerID { inviter.invitee }

    func perform(_ step: (inout Inviter) -> [Inviter.Action]) {
        for action in step(&inviter) {
            switch action {
            case .dial(let index):
                network.dialInvitation(from: self, to: addresses[index], invitation: invitation)
            case .connect(let data, _):
                network.connect(node, with: data)
            case .finished(let outcome):
                node.invitationOutcomes.append((inviter.invitee, outcome))
            }
        }
    }
}

/// One end of an invitation connection: a real connection state machine with purpose 2, and the
/// deadlines `ConnectionHandler` runs for it.
final class InvitationEnd {
    enum Role {
        case dialer(InvitationRun)
        /// The advertiser's end, by its id in the advertiser's core.
        case listener(Int)
    }

    unowned let network: VirtualNetwork
    let node: VirtualNetwork.Node
    let role: Role
    weak var remote: InvitationEnd?
    private var machine: ConnectionStateMachine!
    private(set) var isClosed = false
    private var endReported = false
    private(set) var lastActivity: NIODeadline
    private(set) var request: InvitationRequest?
    private var deadlineGeneration = 0

    init(network: VirtualNetwork, node: VirtualNetwork.Node, role: Role) {
        self.network = network
        self.node = node
        self.role = role
        lastActivity = network.now
    }

    var progress: Int { machine?.establishmentProgress ?? 0 }

    func start(invitation: Invitation?, displayName: String?) {
        let configuration: ConnectionConfiguration
        switch role {
        case .dialer(let run):
            let peer = displayName.map { try! WirePeerID(identifier: node.peer.identifier, displayName: $0) } ?? node.peer
            configuration = ConnectionConfiguration(
                role: .dialer, localPeer: peer, encryptionPreference: node.preference, tls: node.tls, purpose: .invitation,
                expectedPeer: run.invitee.identifier, invitation: invitation)
        case .listener:
            configuration = ConnectionConfiguration(
                role: .listener, localPeer: node.peer, encryptionPreference: .optional, tls: node.advertiserTLS)
        }
        machine = try! ConnectionStateMachine(configuration: configuration)
        arm(after: network.handshakeTimeout) { $0.handshakeTimedOut() }
        perform(machine.start())
    }

    func command(_ body: (inout ConnectionStateMachine) -> [ConnectionAction]) {
        guard machine != nil, !isClosed else { return }
        perform(body(&machine))
    }

    func closeTransport() {
        guard !isClosed else { return }
        isClosed = true
        deadlineGeneration += 1
        if machine != nil { report(machine.transportClosed()) }
        transportGone()
        guard let remote else { return }
        network.schedule(after: network.latency(from: node, to: remote.node)) { [weak remote] in remote?.peerClosed() }
    }

    private func peerClosed() {
        guard !isClosed else { return }
        isClosed = true
        deadlineGeneration += 1
        report(machine.transportClosed())
        transportGone()
    }

    private func receive(_ bytes: ByteBuffer) {
        guard !isClosed, node.isReachable else { return }
        lastActivity = network.now
        perform(machine.receive(bytes))
    }

    private func perform(_ actions: [ConnectionAction]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                guard let remote, node.isReachable, !isClosed else { continue }
                network.schedule(after: network.latency(from: node, to: remote.node)) { [weak remote] in
                    guard let remote, remote.node.isReachable else { return }
                    remote.receive(bytes)
                }
            case .invitationReceived(let request):
                guard case .listener(let id) = role, let side = node.invitations else { continue }
                self.request = request
                arm(after: request.answerWait) { $0.invitationTimedOut() }
                network.advertiserActions(node, side.core.invitationReceived(request, on: id))
            case .awaitingInvitationAnswer(let milliseconds):
                arm(after: InvitationTiming.inviterWait(timeoutMilliseconds: milliseconds, handshakeTimeout: network.handshakeTimeout)) {
                    $0.invitationTimedOut()
                }
            case .invitationAnswered(let answer):
                deadlineGeneration += 1
                if case .dialer(let run) = role { run.perform { $0.answered(answer) } }
            case .close(let error):
                report([.close(error)])
                closeTransport()
            case .admissionRequested(let hello):
                command { $0.admitted(Advertiser<Int>.admission(hello)) }
            case .evaluateTrust, .established, .deliver:
                Issue.record("an invitation connection went past HELLO: \(action)")
            }
        }
    }

    private func report(_ actions: [ConnectionAction]) {
        for case .close(let error) in actions where !endReported {
            endReported = true
            if case .dialer(let run) = role { run.perform { $0.connectionEnded(error) } }
        }
    }

    /// The socket is gone: the inviter hears it, the advertiser's core forgets the connection.
    private func transportGone() {
        switch role {
        case .dialer(let run): run.perform { $0.transportClosed() }
        case .listener(let id): node.invitations?.core.closed(id)
        }
    }

    private func arm(after timeout: TimeAmount, _ fire: @escaping (inout ConnectionStateMachine) -> [ConnectionAction]) {
        deadlineGeneration += 1
        let generation = deadlineGeneration
        network.schedule(after: timeout) {
            guard generation == self.deadlineGeneration, !self.isClosed else { return }
            self.perform(fire(&self.machine))
        }
    }
}
