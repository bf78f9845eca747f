import Foundation
import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol
import ProtocolTestSupport

/// Records a connection's events where a test can poll them.
final class EventLog: Sendable {
    private let state = Mutex<(established: EstablishedConnection?, closed: ConnectionError?, frames: [Frame])>((nil, nil, []))

    var established: EstablishedConnection? { state.withLock { $0.established } }
    var closed: ConnectionError? { state.withLock { $0.closed } }
    var frames: [Frame] { state.withLock { $0.frames } }
    /// Application messages only; keepalive PONGs may arrive on a slow machine.
    var messages: [Frame] { frames.filter { $0.type == .message } }

    func record(_ event: ConnectionEvent) {
        state.withLock { state in
            switch event {
            case .established(let connection): state.established = connection
            case .frame(let frame): state.frames.append(frame)
            case .closed(let error): state.closed = error
            case .invitationReceived, .invitationAnswered: break
            }
        }
    }

    /// Polls until `condition` holds or five seconds pass.
    func wait(until condition: @Sendable (EventLog) -> Bool) async throws -> Bool {
        for _ in 0..<500 {
            if condition(self) { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return condition(self)
    }
}

final class EventRecorder: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = ConnectionEvent
    let log: EventLog
    init(log: EventLog) { self.log = log }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { log.record(unwrapInboundIn(data)) }
}

/// Reads and drops whatever arrives, for a raw attacker that no longer speaks the protocol.
final class DiscardingHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

/// Everything that crossed a proxy, per direction.
final class WireTap: Sendable {
    private let bytes = Mutex<(fromDialer: [UInt8], fromListener: [UInt8])>(([], []))
    var fromDialer: [UInt8] { bytes.withLock { $0.fromDialer } }
    var fromListener: [UInt8] { bytes.withLock { $0.fromListener } }

    /// Appends and returns the offset of these bytes in their direction's stream.
    func record(_ chunk: [UInt8], fromDialer: Bool) -> Int {
        bytes.withLock { state in
            let offset = fromDialer ? state.fromDialer.count : state.fromListener.count
            if fromDialer { state.fromDialer += chunk } else { state.fromListener += chunk }
            return offset
        }
    }
}

typealias Tamper = @Sendable (_ fromDialer: Bool, _ offset: Int, _ bytes: [UInt8]) -> [UInt8]

/// Forwards one direction of a proxied connection, tapping and optionally rewriting it.
final class ForwardingHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let partner: Channel
    let fromDialer: Bool
    let tap: WireTap
    let tamper: Tamper?

    init(partner: Channel, fromDialer: Bool, tap: WireTap, tamper: Tamper?) {
        self.partner = partner
        self.fromDialer = fromDialer
        self.tap = tap
        self.tamper = tamper
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var chunk = Array(unwrapInboundIn(data).readableBytesView)
        let offset = tap.record(chunk, fromDialer: fromDialer)
        if let tamper { chunk = tamper(fromDialer, offset, chunk) }
        partner.writeAndFlush(ByteBuffer(bytes: chunk), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner.close(promise: nil)
        context.fireChannelInactive()
    }
}

/// A real TCP listener, a man-in-the-middle proxy and a dialer, all on 127.0.0.1.
struct LoopbackHarness {
    let group: MultiThreadedEventLoopGroup

    func listen(configuration: ConnectionConfiguration, trust: ConnectionHandler.TrustEvaluator? = nil, log: EventLog) async throws -> Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ConnectionHandler(configuration: configuration, trustEvaluator: trust))
                    try channel.pipeline.syncOperations.addHandler(EventRecorder(log: log))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func dial(
        port: Int, configuration: ConnectionConfiguration, trust: ConnectionHandler.TrustEvaluator? = nil,
        keepalive: KeepalivePolicy? = KeepalivePolicy(), log: EventLog
    ) async throws -> Channel {
        try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ConnectionHandler(configuration: configuration, trustEvaluator: trust, keepalive: keepalive), name: "connection")
                    try channel.pipeline.syncOperations.addHandler(EventRecorder(log: log), name: "events")
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
    }

    /// Accepts on 127.0.0.1 and relays each connection to `upstreamPort`, through `tamper`.
    func proxy(to upstreamPort: Int, tap: WireTap, tamper: Tamper?) async throws -> Channel {
        let group = self.group
        return try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                // Connect upstream before the inbound side starts reading, so no byte is lost.
                ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { upstream in
                        upstream.eventLoop.makeCompletedFuture {
                            try upstream.pipeline.syncOperations.addHandler(
                                ForwardingHandler(partner: inbound, fromDialer: false, tap: tap, tamper: tamper))
                        }
                    }
                    .connect(host: "127.0.0.1", port: upstreamPort)
                    .flatMapThrowing { upstream in
                        try inbound.pipeline.syncOperations.addHandler(
                            ForwardingHandler(partner: upstream, fromDialer: true, tap: tap, tamper: tamper))
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }
}
