import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import MultipeerProtocol

/// The advertiser's listener (docs/PROTOCOL.md §7.2): accepts invitation connections from
/// strangers and hands each invitation up with the connection to answer on. Which pending
/// connection goes when there are too many is `PendingConnections`' decision.
package final class InvitationListener: Sendable {
    /// Invitation connections held at once, and from one source (`PendingSource`).
    package static let maximumPending = 16
    package static let maximumPendingPerSource = 4

    private final class State {
        var pending = PendingConnections<Int>(limit: maximumPending, perSourceLimit: maximumPendingPerSource)
        var connections: [Int: (channel: any Channel, handler: ConnectionHandler)] = [:]
        var nextID = 0

        func progress(_ id: Int) -> PendingProgress {
            PendingProgress(connections[id]?.handler)
        }
    }

    private let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    /// Listens on `host` (any free port); `onInvitation` runs on the listener's loop for each
    /// invitation, with the connection to send `ConnectionCommand.answerInvitation` to.
    package static func bind(
        host: String, localPeer: WirePeerID, eventLoop: any EventLoop,
        onInvitation: @escaping @Sendable (InvitationRequest, any Channel) -> Void
    ) async throws -> InvitationListener {
        // No session yet: optional encryption with an ephemeral certificate (§7.2).
        let tls = try TLSContext(identity: nil)
        let box = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: eventLoop)
        let channel = try await StrangerListenerOptions.apply(to: ServerBootstrap(group: eventLoop))
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                // Out of file descriptors: shed a pending connection and retry shortly, not spin.
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        AcceptBackoffHandler(shouldForwardIOErrorCaught: false) { _ in
                            let state = box.value
                            if let shed = state.pending.shedOne(progress: state.progress) {
                                state.connections[shed]?.channel.close(promise: nil)
                            }
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
                    if let shed = state.pending.accepted(id, from: PendingSource(child.remoteAddress), progress: state.progress) {
                        state.connections[shed]?.channel.close(promise: nil)
                    }
                    // Registered first: a failed setup below closes the child, and this forgets it.
                    child.closeFuture.whenComplete { _ in
                        let state = box.value
                        state.pending.remove(id)
                        state.connections[id] = nil
                    }
                    let configuration = ConnectionConfiguration(
                        role: .listener, localPeer: localPeer, encryptionPreference: .optional, tls: tls,
                        admission: { hello in hello.purpose == .invitation ? .admit : .refuse(.protocolError) })
                    let handler = try ConnectionHandler(configuration: configuration, keepalive: nil)
                    state.connections[id] = (child, handler)
                    try child.pipeline.syncOperations.addHandler(handler)
                    try child.pipeline.syncOperations.addHandler(InvitationRequestHandler { request in onInvitation(request, child) })
                }
            }
            .bind(to: SocketAddress.listening(on: host)).get()
        return InvitationListener(channel: channel)
    }

    package var port: Int? { channel.localAddress?.port }

    /// Stops accepting; connections already taken finish on their own.
    package func close() async { try? await channel.close().get() }

    package func closeNow() { channel.close(promise: nil) }
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
