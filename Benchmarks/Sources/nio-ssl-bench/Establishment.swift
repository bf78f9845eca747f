import NIOCore

enum Establishment {
    /// Connections per second, each timed from connect through the mutual TLS 1.3 handshake (both
    /// sides verifying the other's chain) to the first 64 B echo; closing is not timed, as
    /// multipeer-bench times establishment up to "connected" and disconnects afterwards.
    static func run(loops: Loops, identities: Identities, count: Int) async throws -> Double {
        let server = try await LoopbackServer.start(group: loops.server, context: identities.server, handler: echo)
        do {
            var total = 0.0
            for index in 0..<count { total += try await once(loops: loops, identities: identities, port: server.port, index: index) }
            await server.stop()
            return Double(count) / total
        } catch {
            await server.stop()
            throw error
        }
    }

    /// The key exchange group of one more connection, untimed, read from its ServerHello.
    static func keyExchangeGroup(loops: Loops, identities: Identities) async throws -> String {
        let server = try await LoopbackServer.start(group: loops.server, context: identities.server, handler: echo)
        let group = loops.client.next().makePromise(of: String.self)
        do {
            _ = try await once(loops: loops, identities: identities, port: server.port, index: 0, keyExchangeGroup: group)
            await server.stop()
            // Settled by now: the reader completes it at the ServerHello, or when the connection closes.
            return try await group.futureResult.get()
        } catch {
            group.fail(error)  // a no-op if the reader settled it
            await server.stop()
            throw error
        }
    }

    /// A failed handshake throws, so it can never count as a cheaper success.
    private static func once(loops: Loops, identities: Identities, port: Int, index: Int,
                             keyExchangeGroup: EventLoopPromise<String>? = nil) async throws -> Double {
        let start = ContinuousClock.now
        let client = try await Loopback.connect(group: loops.client, context: identities.client, port: port, keyExchangeGroup: keyExchangeGroup)
        return try await client.executeThenClose { inbound, outbound in
            var replies = inbound.makeAsyncIterator()
            let request = RoundTrip.probe(index)
            try await outbound.write(request)
            guard try await replies.next() == request else { throw LoopbackError("connection \(index) got no echo") }
            return seconds(ContinuousClock.now - start)
        }
    }
}
