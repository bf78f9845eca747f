import MultipeerWire
import NIOCore
import NIOPosix
import MultipeerProtocol

extension SessionEngine {
    /// Invites the advertiser at `addresses` (from discovery) into this session: dials its
    /// invitation port, sends HELLO purpose 2 and INVITATION, and waits for the answer; on
    /// acceptance dials the accepting session with the connection data it sent (§7.2). The
    /// `Inviter` core decides each step. `addresses` are socket addresses, so IPv6 link-local
    /// ones keep their interface.
    package func invite(
        _ peer: WirePeerID, at addresses: [SocketAddress], context: ByteBuffer, timeoutMilliseconds: UInt32
    ) -> EventLoopFuture<InvitationOutcome> {
        let invitation: Invitation
        do {
            invitation = try Invitation(timeoutMilliseconds: timeoutMilliseconds, context: context)
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        let outcome = eventLoop.makePromise(of: InvitationOutcome.self)
        eventLoop.execute { [self] in
            let run = InvitationRun(
                engine: self, inviter: Inviter(invitee: peer, localPeer: configuration.localPeer.identifier, addressCount: addresses.count),
                addresses: addresses, invitation: invitation, outcome: outcome)
            run.perform { $0.start() }
        }
        return outcome.futureResult
    }
}

/// One invitation in flight: carries out its `Inviter`'s actions. Lives on the engine's loop.
private final class InvitationRun {
    private let engine: SessionEngine
    private var inviter: Inviter
    private let addresses: [SocketAddress]
    private let invitation: Invitation
    private let outcome: EventLoopPromise<InvitationOutcome>

    init(
        engine: SessionEngine, inviter: Inviter, addresses: [SocketAddress], invitation: Invitation,
        outcome: EventLoopPromise<InvitationOutcome>
    ) {
        self.engine = engine
        self.inviter = inviter
        self.addresses = addresses
        self.invitation = invitation
        self.outcome = outcome
    }

    func perform(_ step: (inout Inviter) -> [Inviter.Action]) {
        for action in step(&inviter) {
            switch action {
            case .dial(let index):
                dial(addresses[index])
            case .connect(let data, let index):
                var linkScope: UInt32?
                if case .v6(let ipv6) = addresses[index], ipv6.address.sin6_scope_id != 0 { linkScope = ipv6.address.sin6_scope_id }
                engine.connect(to: data, linkScope: linkScope)
            case .finished(let result):
                outcome.succeed(result)
            }
        }
    }

    private func dial(_ address: SocketAddress) {
        let configuration = engine.configuration
        let connection = ConnectionConfiguration(
            role: .dialer, localPeer: configuration.localPeer, encryptionPreference: configuration.encryptionPreference,
            tls: configuration.tls, purpose: .invitation, recordsPerKeyUpdate: configuration.recordsPerKeyUpdate,
            expectedPeer: inviter.invitee.identifier, invitation: invitation, logger: configuration.logger)
        let handshakeTimeout = configuration.handshakeTimeout
        let eventLoop = engine.eventLoop
        let run = NIOLoopBound(self, eventLoop: eventLoop)
        ClientBootstrap(group: eventLoop)
            .connectTimeout(handshakeTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { socket in
                socket.eventLoop.makeCompletedFuture {
                    try socket.pipeline.syncOperations.addHandler(try ConnectionHandler(
                        configuration: connection, handshakeTimeout: handshakeTimeout, keepalive: nil))
                    try socket.pipeline.syncOperations.addHandler(InvitationAnswerHandler(run: run.value))
                }
            }
            .connect(to: address)
            .whenComplete { result in
                switch result {
                case .success: run.value.perform { $0.connectionOpened() }
                case .failure(let error): run.value.perform { $0.dialFailed("\(error)") }
                }
            }
    }
}

/// Hands what an invitation connection did to its run.
private final class InvitationAnswerHandler: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    private let run: InvitationRun

    init(run: InvitationRun) { self.run = run }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .invitationAnswered(let answer): run.perform { $0.answered(answer) }
        case .closed(let error): run.perform { $0.connectionEnded(error) }
        default: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        run.perform { $0.transportClosed() }
        context.fireChannelInactive()
    }
}
