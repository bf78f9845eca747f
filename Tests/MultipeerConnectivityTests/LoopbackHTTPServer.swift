import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A tiny HTTP/1.1 server on 127.0.0.1 that serves fixed bodies by path (404 otherwise), for
/// resources sent from http: URLs.
final class LoopbackHTTPServer: Sendable {
    let port: Int
    private let channel: any Channel

    init(bodies: [String: Data]) async throws {
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Responder(bodies: bodies))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    func close() async { try? await channel.close() }

    private final class Responder: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let bodies: [String: Data]
        init(bodies: [String: Data]) { self.bodies = bodies }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .head(let request) = unwrapInboundIn(data) else { return }
            let body = bodies[request.uri]
            var headers = HTTPHeaders()
            headers.add(name: "Content-Length", value: "\(body?.count ?? 0)")
            headers.add(name: "Connection", value: "close")
            let head = HTTPResponseHead(version: request.version, status: body == nil ? .notFound : .ok, headers: headers)
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            if let body { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil) }
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
