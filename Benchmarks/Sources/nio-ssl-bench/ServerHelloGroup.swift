import NIOCore

/// The key exchange group of a handshake, as the server chose it: swift-nio-ssl does not say,
/// but TLS 1.3's ServerHello travels in clear and names it in its key_share extension
/// (RFC 8446 §4.1.3, §4.2.8; in a HelloRetryRequest the extension holds the group alone).
enum ServerHelloGroup {
    enum Reading: Equatable {
        case needMore
        case group(UInt16)
        case malformed(String)
    }

    /// OpenSSL's names, as multipeer-bench reports the library's group.
    static func name(_ group: UInt16) -> String {
        switch group {
        case 0x001D: "x25519"
        case 0x0017: "secp256r1"
        case 0x0018: "secp384r1"
        case 0x11EC: "X25519MLKEM768"
        case 0x0202: "MLKEM1024"
        default: "group 0x" + String(group, radix: 16)
        }
    }

    static let maximumRecord = 5 + (1 << 14)

    /// Reads the first TLS record of the server's bytes, which must hold the whole ServerHello.
    static func read(_ bytes: ByteBuffer) -> Reading {
        var buffer = bytes
        guard let type = buffer.readInteger(as: UInt8.self), buffer.readInteger(as: UInt16.self) != nil,
              let length = buffer.readInteger(as: UInt16.self) else { return .needMore }
        guard type == 22 else { return .malformed("the server's first record is of type \(type), not a handshake") }
        guard 5 + Int(length) <= maximumRecord else { return .malformed("a record of \(length) bytes") }
        guard var record = buffer.readSlice(length: Int(length)) else { return .needMore }
        guard record.readInteger(as: UInt8.self) == 2, let high = record.readInteger(as: UInt8.self),
              let low = record.readInteger(as: UInt16.self) else { return .malformed("the first handshake message is not a ServerHello") }
        let messageLength = Int(high) << 16 | Int(low)
        guard var message = record.readSlice(length: messageLength) else { return .malformed("the ServerHello spans records") }
        // legacy_version, random, legacy_session_id_echo, cipher_suite, legacy_compression_method
        guard message.readSlice(length: 2 + 32) != nil, let sessionIDLength = message.readInteger(as: UInt8.self),
              message.readSlice(length: Int(sessionIDLength) + 2 + 1) != nil,
              let extensionsLength = message.readInteger(as: UInt16.self),
              var extensions = message.readSlice(length: Int(extensionsLength)) else { return .malformed("a truncated ServerHello") }
        while let type = extensions.readInteger(as: UInt16.self) {
            guard let length = extensions.readInteger(as: UInt16.self), var body = extensions.readSlice(length: Int(length)) else {
                return .malformed("a truncated extension")
            }
            if type == 51 {  // key_share
                guard let group = body.readInteger(as: UInt16.self) else { return .malformed("an empty key_share") }
                return .group(group)
            }
        }
        return .malformed("a ServerHello without key_share")
    }
}

/// Sits ahead of the client's TLS handler on a probe connection: keeps a copy of the server's
/// first bytes until the ServerHello is whole, reads the group from it, and passes every byte on
/// unchanged. `result` is completed once, with the group's name or an error.
final class ServerHelloGroupReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let result: EventLoopPromise<String>
    private var seen = ByteBuffer()
    private var done = false

    init(result: EventLoopPromise<String>) { self.result = result }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !done {
            var bytes = Self.unwrapInboundIn(data)
            seen.writeBuffer(&bytes)
            switch ServerHelloGroup.read(seen) {
            case .needMore:
                if seen.readableBytes > ServerHelloGroup.maximumRecord { finish(.failure(LoopbackError("no ServerHello in the first record"))) }
            case .group(let group): finish(.success(ServerHelloGroup.name(group)))
            case .malformed(let reason): finish(.failure(LoopbackError(reason)))
            }
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(LoopbackError("the connection closed before the ServerHello")))
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(.failure(LoopbackError("the group reader was removed before the ServerHello")))
    }

    private func finish(_ outcome: Result<String, any Error>) {
        guard !done else { return }
        done = true
        seen = ByteBuffer()
        result.completeWith(outcome)
    }
}
