import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// One TLS handshake with the library as the other side (scripts/pq-interop): swift-nio-ssl's
/// BoringSSL with its default key exchange groups unless `--curves` names some. MPCP's clear-text
/// preamble (docs/PROTOCOL.md §3) comes first, as the library expects; after the handshake the
/// connection is closed, since this peer speaks no MPCP frames. Certificates as in the benchmark:
/// the server presents alice, the client bob, each verifying the other's chain to the test root.
enum TLSPeer {
    enum Role: String { case client, server }

    /// MPCP, versions 1 to 1, encryption required, hasIdentity set.
    static let preamble: [UInt8] = Array("MPCP".utf8) + [1, 1, 1, 1]
    static let deadline = TimeAmount.seconds(10)

    /// Prints `LISTENING <port>` (server), then `HANDSHAKE <alpn>` once the handshake is complete.
    static func run(role: Role, port: Int?, identities: Identities) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            say("HANDSHAKE \(try await handshake(role: role, port: port, identities: identities, group: group))")
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try? await group.shutdownGracefully()
    }

    private static func handshake(role: Role, port: Int?, identities: Identities, group: MultiThreadedEventLoopGroup) async throws -> String {
        let done = group.next().makePromise(of: String.self)
        // Every wait is bounded: the accept, the preambles and the handshake together.
        let timer = done.futureResult.eventLoop.scheduleTask(in: deadline) { done.fail(TLSPeerError("no handshake within \(deadline)")) }
        defer {
            timer.cancel()
            done.fail(TLSPeerError("no handshake"))  // a no-op once completed; NIO's debug builds trap on unfulfilled promises
        }
        @Sendable func setUp(_ channel: any Channel, tls: @escaping @Sendable () throws -> NIOSSLHandler) -> EventLoopFuture<Void> {
            channel.eventLoop.makeCompletedFuture {
                let watcher = HandshakeWatcher(done: done)
                try channel.pipeline.syncOperations.addHandlers(PreambleExchange(role: role, tls: tls, done: done), watcher)
            }
        }
        let channel: any Channel
        switch role {
        case .server:
            let server = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 1)
                .childChannelInitializer { setUp($0) { NIOSSLServerHandler(context: identities.server) } }
                .bind(host: "127.0.0.1", port: 0).get()
            guard let bound = server.localAddress?.port else { throw TLSPeerError("the listener has no port") }
            say("LISTENING \(bound)")
            channel = server
        case .client:
            guard let port else { throw UsageError("--tls-peer client needs --port") }
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(deadline)
                .channelInitializer { setUp($0) { try NIOSSLClientHandler(context: identities.client, serverHostname: nil) } }
                .connect(host: "127.0.0.1", port: port).get()
        }
        defer { channel.close(promise: nil) }  // the listener, or the client's connection
        return try await done.futureResult.get()
    }

    /// Unbuffered: the script waits for these lines while this process runs.
    private static func say(_ line: String) {
        FileHandle.standardOutput.write(Data("\(line)\n".utf8))
    }

    /// The configured curves by the names OpenSSL uses; nil keeps swift-nio-ssl's default.
    static func curves(_ names: String?) throws -> [NIOTLSCurve]? {
        guard let names else { return nil }
        let known: [String: NIOTLSCurve] = [
            "X25519MLKEM768": .x25519_MLKEM768, "x25519": .x25519, "secp256r1": .secp256r1, "secp384r1": .secp384r1,
        ]
        return try names.split(separator: ":").map { name in
            guard let curve = known[String(name)] else { throw UsageError("--curves: \(name) is not one of \(known.keys.sorted())") }
            return curve
        }
    }
}

/// Sends this side's preamble (the client at once, the server once the client's has arrived),
/// reads the peer's 8 bytes, then puts TLS in its own place and passes on what followed.
private final class PreambleExchange: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let role: TLSPeer.Role
    private let tls: @Sendable () throws -> NIOSSLHandler
    private let done: EventLoopPromise<String>
    private var received = ByteBuffer()

    init(role: TLSPeer.Role, tls: @escaping @Sendable () throws -> NIOSSLHandler, done: EventLoopPromise<String>) {
        self.role = role
        self.tls = tls
        self.done = done
    }

    func channelActive(context: ChannelHandlerContext) {
        if role == .client { context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: TLSPeer.preamble)), promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        received.writeBuffer(&bytes)
        guard received.readableBytes >= TLSPeer.preamble.count else { return }
        let peer = received.readBytes(length: TLSPeer.preamble.count)!
        guard peer.starts(with: TLSPeer.preamble.prefix(4)) else {
            done.fail(TLSPeerError("the peer's preamble is not MPCP: \(peer)"))
            context.close(promise: nil)
            return
        }
        if role == .server { context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: TLSPeer.preamble)), promise: nil) }
        do {
            try context.pipeline.syncOperations.addHandler(try tls(), position: .after(self))
        } catch {
            done.fail(error)
            context.close(promise: nil)
            return
        }
        if received.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(received)) }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(TLSPeerError("the connection closed during the preambles"))
        context.fireChannelInactive()
    }
}

/// Completes `done` with the negotiated ALPN when the handshake completes, or fails it.
private final class HandshakeWatcher: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let done: EventLoopPromise<String>

    init(done: EventLoopPromise<String>) { self.done = done }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted(let alpn) = event {
            done.succeed(alpn ?? "-")
            context.close(promise: nil)  // with close_notify: nothing more to say
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}  // no MPCP frames here

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done.fail(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        done.fail(TLSPeerError("the connection closed before the handshake completed"))
        context.fireChannelInactive()
    }
}

struct TLSPeerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
