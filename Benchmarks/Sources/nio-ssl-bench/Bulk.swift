import NIOCore

enum Bulk {
    static let messageSize = 1 << 20

    /// Bytes per second of 1 MiB length-prefixed messages from client to server over mutual TLS
    /// 1.3, timed from the first write until the receiving task, having counted every byte,
    /// acknowledges. Up to 8 MiB may wait in the sender's channel, like multipeer-bench's window.
    static func run(loops: Loops, identities: Identities, bytes: Int) async throws -> Double {
        let server = try await LoopbackServer.start(group: loops.server, context: identities.server) { inbound, outbound in
            var messages = inbound.makeAsyncIterator()
            // The hello completes the handshake before the clock starts.
            guard let hello = try await messages.next() else { return }
            try await outbound.write(hello)
            var received = 0
            while received < bytes, let message = try await messages.next() { received += message.readableBytes }
            try await outbound.write(hello)
        }
        do {
            let elapsed = try await send(loops: loops, identities: identities, port: server.port, bytes: bytes)
            await server.stop()
            return Double(bytes) / elapsed
        } catch {
            await server.stop()
            throw error
        }
    }

    private static func send(loops: Loops, identities: Identities, port: Int, bytes: Int) async throws -> Double {
        let client = try await Loopback.connect(group: loops.client, context: identities.client, port: port,
                                                writeBufferWaterMark: .init(low: 4 << 20, high: 8 << 20))
        return try await client.executeThenClose { inbound, outbound in
            var replies = inbound.makeAsyncIterator()
            let hello = ByteBuffer(repeating: 1, count: 1)
            try await outbound.write(hello)
            guard try await replies.next() != nil else { throw LoopbackError("the server closed before the handshake") }
            let message = ByteBuffer(repeating: 0x5A, count: messageSize)
            let start = ContinuousClock.now
            for _ in 0..<(bytes / messageSize) { try await outbound.write(message) }
            guard try await replies.next() != nil else { throw LoopbackError("the server closed before acknowledging") }
            return seconds(ContinuousClock.now - start)
        }
    }
}
