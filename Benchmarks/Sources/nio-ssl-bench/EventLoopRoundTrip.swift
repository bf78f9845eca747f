import NIOCore
import NIOPosix
import NIOSSL

/// Round trips with the application code in channel handlers on the event loops, no task
/// anywhere: the counterpart of multipeer-bench's "network thread" figure, whose tasks run on
/// the sessions' network threads. Same identities, TLS configuration, loops, framing, probes and
/// warm-up as RoundTrip's task variant.
enum EventLoopRoundTrip {
    /// Round trips of 64 B messages in microseconds, each timed on the client's event loop from
    /// the write of a probe to the read of its echo.
    static func run(loops: Loops, identities: Identities, samples: Int) async throws -> [Double] {
        let server = try await EchoServer.start(group: loops.server, context: identities.server)
        do {
            let times = try await measure(loops: loops, identities: identities, port: server.port, samples: samples)
            await server.stop()
            return times
        } catch {
            await server.stop()
            throw error
        }
    }

    private static func measure(loops: Loops, identities: Identities, port: Int, samples: Int) async throws -> [Double] {
        let done = loops.client.next().makePromise(of: [Double].self)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: loops.client)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connectTimeout(.seconds(10))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try Pipeline.addFraming(channel, tls: try NIOSSLClientHandler(context: identities.client, serverHostname: nil))
                        try channel.pipeline.syncOperations.addHandler(ProbeSender(total: RoundTrip.warmUp + samples, done: done))
                    }
                }
                .connect(host: "127.0.0.1", port: port).get()
        } catch {
            done.fail(error)  // settles it: NIO's debug builds trap on a promise left pending
            throw error
        }
        let timer = channel.eventLoop.scheduleTask(in: RoundTrip.deadline(samples: samples)) {
            done.fail(RoundTrip.overdue(samples))
            channel.close(promise: nil)
        }
        defer { timer.cancel() }
        let times: [Double]
        do {
            times = try await done.futureResult.get()
        } catch {
            try? await channel.close()
            throw error
        }
        try? await channel.closeFuture.get()  // the sender closes it after the last echo
        return times
    }
}

/// Sends probe after probe, each from the read of the previous one's echo; completes `done`
/// with the times of those after the warm-up, then closes the connection.
private final class ProbeSender: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let total: Int
    private let done: EventLoopPromise<[Double]>
    private var index = 0
    private var request = ByteBuffer()
    private var start = ContinuousClock.now
    private var times: [Double] = []

    init(total: Int, done: EventLoopPromise<[Double]>) {
        self.total = total
        self.done = done
        times.reserveCapacity(total - RoundTrip.warmUp)
    }

    /// The first probe waits in the TLS handler until the handshake completes, as the task
    /// variant's first write does; both leave it among the uncounted ones.
    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        send(context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let reply = Self.unwrapInboundIn(data)
        guard index < total else { return }
        guard reply == request else {
            fail(LoopbackError("echo \(index) does not match its request"), context: context)
            return
        }
        if index >= RoundTrip.warmUp { times.append(seconds(ContinuousClock.now - start) * 1e6) }
        index += 1
        if index == total {
            done.succeed(times)
            context.close(promise: nil)
        } else {
            send(context: context)
        }
    }

    private func send(context: ChannelHandlerContext) {
        request = RoundTrip.probe(index)
        start = ContinuousClock.now
        context.writeAndFlush(Self.wrapOutboundOut(request), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(LoopbackError("the connection closed during round trips"))  // a no-op once completed
        context.fireChannelInactive()
    }

    private func fail(_ error: any Error, context: ChannelHandlerContext) {
        done.fail(error)
        context.close(promise: nil)
    }
}

/// Writes every message straight back from `channelRead`, on the server's event loop.
private final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.writeAndFlush(Self.wrapOutboundOut(Self.unwrapInboundIn(data)), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// A TLS server on 127.0.0.1 with an ephemeral port on its own event loop, echoing with
/// EchoHandler; serves one run's connection.
private struct EchoServer {
    let port: Int
    private let listener: any Channel
    private let accepted: EventLoopPromise<any Channel>

    static func start(group: any EventLoopGroup, context: NIOSSLContext) async throws -> EchoServer {
        let accepted = group.next().makePromise(of: (any Channel).self)
        let listener: any Channel
        do {
            listener = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelInitializer { channel in
                    accepted.succeed(channel)  // a no-op for any later one
                    return channel.eventLoop.makeCompletedFuture {
                        try Pipeline.addFraming(channel, tls: NIOSSLServerHandler(context: context))
                        try channel.pipeline.syncOperations.addHandler(EchoHandler())
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
        } catch {
            accepted.fail(error)
            throw error
        }
        guard let port = listener.localAddress?.port else {
            let server = EchoServer(port: 0, listener: listener, accepted: accepted)
            await server.stop()
            throw LoopbackError("the listener has no port")
        }
        return EchoServer(port: port, listener: listener, accepted: accepted)
    }

    /// Closes the listener and the connection, if one came, and waits until both are closed.
    func stop() async {
        try? await listener.close()
        accepted.fail(LoopbackError("no connection"))  // a no-op if one came
        if let connection = try? await accepted.futureResult.get() {
            connection.close(promise: nil)
            try? await connection.closeFuture.get()
        }
    }
}
