import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import MultipeerProtocol

/// The advertiser's listener (docs/PROTOCOL.md §7.2): accepts invitation connections from
/// strangers, hands each invitation up with a reply to answer it by, and carries out what the
/// `Advertiser` core decides (which pending connection goes, what each invitation is answered).
package final class InvitationListener: Sendable {
    package static var maximumPending: Int { Advertiser<Int>.maximumPending }
    package static var maximumPendingPerSource: Int { Advertiser<Int>.maximumPendingPerSource }

    /// The core and the connections it speaks of; only touched on the listener's event loop.
    fileprivate final class State {
        var advertiser = Advertiser<Int>()
        var connections: [Int: (socket: any Channel, handler: ConnectionHandler)] = [:]
        /// How each accepted invitation makes its connection data, once the core asks.
        var dataMakers: [Int: @Sendable () async -> ConnectionData?] = [:]
        var nextID = 0

        func progress(_ id: Int) -> PendingProgress {
            PendingProgress(connections[id]?.handler)
        }
    }

    private let listener: any Channel

    private init(listener: any Channel) { self.listener = listener }

    /// Listens on `host` (any free port); `onInvitation` runs on the listener's loop for each
    /// invitation, with the reply that answers it.
    package static func bind(
        host: String, localPeer: WirePeerID, eventLoop: any EventLoop,
        onInvitation: @escaping @Sendable (InvitationRequest, InvitationReply) -> Void
    ) async throws -> InvitationListener {
        // No session yet: optional encryption with an ephemeral certificate (§7.2).
        let tls = try TLSContext(identity: nil)
        let box = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: eventLoop)
        let listener = try await StrangerListenerOptions.apply(to: ServerBootstrap(group: eventLoop))
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { listener in
                // Out of file descriptors: shed a pending connection and retry shortly, not spin.
                listener.eventLoop.makeCompletedFuture {
                    try StrangerListenerOptions.addHandlers(to: listener)
                    try listener.pipeline.syncOperations.addHandler(
                        AcceptBackoffHandler(shouldForwardIOErrorCaught: false) { _ in
                            let state = box.value
                            perform(state.advertiser.shedOne(progress: state.progress), box: box)
                            return .milliseconds(20)
                        })
                }
            }
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    let state = box.value
                    state.nextID += 1
                    let id = state.nextID
                    // Registered first: a failed setup below closes the child, and this forgets it.
                    child.closeFuture.whenComplete { _ in
                        let state = box.value
                        state.advertiser.closed(id)
                        state.connections[id] = nil
                        state.dataMakers[id] = nil
                    }
                    let configuration = ConnectionConfiguration(
                        role: .listener, localPeer: localPeer, encryptionPreference: .optional, tls: tls)
                    let handler = try ConnectionHandler(
                        configuration: configuration, admission: { hello, _ in Advertiser<Int>.admission(hello) }, keepalive: nil)
                    state.connections[id] = (child, handler)
                    try child.pipeline.syncOperations.addHandler(handler)
                    perform(state.advertiser.accepted(id, from: PendingSource(child.remoteAddress), progress: state.progress), box: box)
                    let reply = InvitationReply(box: box, id: id)
                    try child.pipeline.syncOperations.addHandler(InvitationRequestHandler { request in
                        let state = box.value
                        for action in state.advertiser.invitationReceived(request, on: id) {
                            if case .askApplication = action { onInvitation(request, reply) }
                        }
                    })
                }
            }
            .bind(to: SocketAddress.listening(on: host)).get()
        return InvitationListener(listener: listener)
    }

    /// Carries out the core's actions, on the loop.
    fileprivate static func perform(_ actions: [Advertiser<Int>.Action], box: NIOLoopBoundBox<State>) {
        let state = box.value
        for action in actions {
            switch action {
            case .close(let id):
                state.connections[id]?.socket.close(promise: nil)
            case .askApplication:
                break  // asked where the invitation arrives, with its reply
            case .makeConnectionData(let id, _):
                guard let make = state.dataMakers.removeValue(forKey: id) else {
                    perform(state.advertiser.connectionDataMade(id, nil), box: box)
                    continue
                }
                Task {
                    let data = await make()
                    box.eventLoop.execute { perform(box.value.advertiser.connectionDataMade(id, data), box: box) }
                }
            case .answer(let id, let answer):
                state.connections[id]?.socket.triggerUserOutboundEvent(ConnectionCommand.answerInvitation(answer), promise: nil)
            }
        }
    }

    package var port: Int? { listener.localAddress?.port }

    /// Stops accepting; connections already taken finish on their own.
    package func close() async { try? await listener.close().get() }

    package func closeNow() { listener.close(promise: nil) }
}

/// The application's answer to one invitation, from any thread. The first answer counts; a
/// later one, or one after the invitation timed out, is dropped (the `Advertiser` core decides).
package struct InvitationReply: Sendable {
    fileprivate let box: NIOLoopBoundBox<InvitationListener.State>
    fileprivate let id: Int

    package func decline() {
        let (box, id) = (box, id)
        box.eventLoop.execute {
            InvitationListener.perform(box.value.advertiser.appAnswered(id, accept: false, into: nil), box: box)
        }
    }

    /// Accepts into the session described by `session`, which makes the inviter's connection
    /// data with `connectionData` if the core lets it in.
    package func accept(into session: InvitingSession, connectionData: @escaping @Sendable () async -> ConnectionData?) {
        let (box, id) = (box, id)
        box.eventLoop.execute {
            let state = box.value
            if state.dataMakers[id] == nil, state.connections[id] != nil { state.dataMakers[id] = connectionData }
            InvitationListener.perform(state.advertiser.appAnswered(id, accept: true, into: session), box: box)
        }
    }
}

/// Hands an invitation connection's request on.
private final class InvitationRequestHandler: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    let onInvitation: (InvitationRequest) -> Void

    init(onInvitation: @escaping (InvitationRequest) -> Void) { self.onInvitation = onInvitation }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .invitationReceived(let request) = unwrapInboundIn(data) { onInvitation(request) }
    }
}
