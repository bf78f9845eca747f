import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on loopback in front of a listener, which counts the connections it relays and
/// those that both ends have closed. It never closes a connection itself: an end's close is passed
/// on as a half-close (after the bytes before it), and the connection counts as finished once the
/// other end has closed too. So a finished connection is one both peers really let go of, and
/// after a hop through each peer's event loop, whatever they do on that close has been done.
final class TCPRelay: Sendable {
    let port: Int
    private let server: any Channel
    private let counts: Counts

    final class Counts: Sendable {
        private let value = Mutex((opened: 0, finished: 0))
        func open() { value.withLock { $0.opened += 1 } }
        func finish() { value.withLock { $0.finished += 1 } }
        var opened: Int { value.withLock { $0.opened } }
        var finished: Int { value.withLock { $0.finished } }
    }

    /// Connections accepted so far.
    var opened: Int { counts.opened }
    /// Connections both of whose ends have closed.
    var finished: Int { counts.finished }

    let host: String

    /// Listens on `host` (any loopback address) and forwards to 127.0.0.1 at `targetPort`.
    init(to targetPort: Int, host: String = "127.0.0.1", group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws {
        self.host = host
        let counts = Counts()
        self.counts = counts
        server = try await ServerBootstrap(group: group)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { inbound in
                // Reading starts once this future completes and the channel is registered.
                counts.open()
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelOption(.allowRemoteHalfClosure, value: true)
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { outbound in
                        let connection = RelayedConnection(counts: counts)
                        try inbound.pipeline.syncOperations.addHandler(RelayHalf(connection: connection, side: 0, partner: outbound))
                        try outbound.pipeline.syncOperations.addHandler(RelayHalf(connection: connection, side: 1, partner: inbound))
                    }
                    .flatMapErrorThrowing { error in
                        // The listener is gone: the dialer sees its connection end, as without a relay.
                        counts.finish()
                        throw error
                    }
            }
            .bind(host: host, port: 0).get()
        port = server.localAddress!.port!
    }

    /// `data` with its endpoints replaced by this relay.
    func rewrite(_ data: ConnectionData) throws -> ConnectionData {
        try ConnectionData(
            encryptionPreference: data.encryptionPreference, token: data.token, forPeer: data.forPeer, peerID: data.peerID,
            certificateFingerprint: data.certificateFingerprint,
            endpoints: [WireEndpoint(address: .ipv4(host.split(separator: ".").reduce(0) { $0 << 8 | UInt32($1)! }), port: UInt16(port))])
    }

    func close() async { try? await server.close().get() }
}

/// Both halves of one relayed connection; touched only on their shared event loop.
private final class RelayedConnection: @unchecked Sendable {
    let counts: TCPRelay.Counts
    var closed = [false, false]

    init(counts: TCPRelay.Counts) { self.counts = counts }

    func sideClosed(_ side: Int) {
        guard !closed[side] else { return }
        closed[side] = true
        if closed[0] && closed[1] { counts.finish() }
    }
}

private final class RelayHalf: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let connection: RelayedConnection
    let side: Int
    let partner: any Channel
    private var lastWrite: EventLoopFuture<Void>?

    init(connection: RelayedConnection, side: Int, partner: any Channel) {
        self.connection = connection
        self.side = side
        self.partner = partner
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastWrite = partner.writeAndFlush(unwrapInboundIn(data))
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { endReached(context: context) }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        endReached(context: context)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)  // a reset: this end is gone
    }

    /// This end closed: pass it on once the bytes before it are written.
    private func endReached(context: ChannelHandlerContext) {
        guard !connection.closed[side] else { return }
        connection.sideClosed(side)
        let partner = partner
        let halfClose: @Sendable () -> Void = { partner.close(mode: .output, promise: nil) }
        if let lastWrite {
            lastWrite.whenComplete { _ in halfClose() }
        } else {
            halfClose()
        }
        if connection.closed[0] && connection.closed[1] {
            context.close(promise: nil)
            partner.close(promise: nil)
        }
    }
}
