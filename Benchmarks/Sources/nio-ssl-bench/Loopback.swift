import NIOCore
import NIOPosix
import NIOSSL

typealias MessageChannel = NIOAsyncChannel<ByteBuffer, ByteBuffer>
typealias ConnectionHandler = @Sendable (NIOAsyncChannelInboundStream<ByteBuffer>, NIOAsyncChannelOutboundWriter<ByteBuffer>) async throws -> Void

enum Pipeline {
    static let maximumMessage = 2 << 20

    /// TLS, then the length-prefix framing, wrapped for use from Swift tasks; `ahead`, if any,
    /// sees the bytes before TLS does.
    static func configure(_ channel: any Channel, tls: some ChannelHandler, configuration: MessageChannel.Configuration = .init(),
                          ahead: (any ChannelHandler)? = nil) throws -> MessageChannel {
        try addFraming(channel, tls: tls, ahead: ahead)
        return try MessageChannel(wrappingChannelSynchronously: channel, configuration: configuration)
    }

    /// TLS, then the length-prefix framing; what follows them sees whole messages.
    static func addFraming(_ channel: any Channel, tls: some ChannelHandler, ahead: (any ChannelHandler)? = nil) throws {
        let operations = channel.pipeline.syncOperations
        if let ahead { try operations.addHandler(ahead) }
        try operations.addHandler(tls)
        try operations.addHandler(ByteToMessageHandler(LengthPrefixDecoder(maximumLength: maximumMessage)))
        try operations.addHandler(LengthPrefixWriter())
    }
}

/// A TLS server on 127.0.0.1 with an ephemeral port on its own event loop; each accepted
/// connection is served by `handler` in a task of its own until the client closes it.
struct LoopbackServer {
    let port: Int
    private let listener: any Channel
    private let accepting: Task<Void, Never>

    static func start(group: any EventLoopGroup, context: NIOSSLContext, handler: @escaping ConnectionHandler) async throws -> LoopbackServer {
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture { try Pipeline.configure(channel, tls: NIOSSLServerHandler(context: context)) }
            }
        guard let port = server.channel.localAddress?.port else { throw LoopbackError("the listener has no port") }
        let accepting = Task<Void, Never> {
            // Ends when the listener is closed; each child ends when its client closes.
            try? await server.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask { try? await connection.executeThenClose { try await handler($0, $1) } }
                    }
                }
            }
        }
        return LoopbackServer(port: port, listener: server.channel, accepting: accepting)
    }

    func stop() async {
        try? await listener.close()
        await accepting.value
    }
}

enum Loopback {
    /// A TLS client connection to `port` on 127.0.0.1; the handshake runs on the first write.
    /// `group`, if given, gets the key exchange group the server chose (ServerHelloGroupReader).
    static func connect(group: any EventLoopGroup, context: NIOSSLContext, port: Int,
                        configuration: MessageChannel.Configuration = .init(),
                        writeBufferWaterMark: ChannelOptions.Types.WriteBufferWaterMark? = nil,
                        keyExchangeGroup: EventLoopPromise<String>? = nil) async throws -> MessageChannel {
        var bootstrap = ClientBootstrap(group: group)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
        if let writeBufferWaterMark { bootstrap = bootstrap.channelOption(.writeBufferWaterMark, value: writeBufferWaterMark) }
        return try await bootstrap.connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try Pipeline.configure(channel, tls: try NIOSSLClientHandler(context: context, serverHostname: nil), configuration: configuration,
                                       ahead: keyExchangeGroup.map { ServerHelloGroupReader(result: $0) })
            }
        }
    }
}

struct LoopbackError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
