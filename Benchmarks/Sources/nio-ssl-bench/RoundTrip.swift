import NIOCore

/// Serves every message straight back, from the connection's task.
let echo: ConnectionHandler = { inbound, outbound in
    for try await message in inbound { try await outbound.write(message) }
}

enum RoundTrip {
    static let size = 64
    static let warmUp = 50

    /// A probe of `size` bytes carrying its index, so an echo is checked against its request.
    static func probe(_ index: Int) -> ByteBuffer {
        var probe = ByteBuffer(repeating: 0, count: size)
        probe.setInteger(UInt64(index), at: 0)
        return probe
    }

    /// The longest a run may take, far above a loaded machine's round trips: a stalled run then
    /// ends with an error instead of hanging.
    static func deadline(samples: Int) -> TimeAmount { .seconds(10) + .milliseconds(Int64(5 * (warmUp + samples))) }

    static func overdue(_ samples: Int) -> LoopbackError {
        LoopbackError("\(warmUp + samples) round trips not done within \(deadline(samples: samples))")
    }

    /// Round trips of 64 B messages in microseconds, measured from an ordinary Swift task that
    /// writes each request and awaits its echo (served by a task too), the counterpart of
    /// multipeer-bench's "events task" figure. EventLoopRoundTrip is the network thread's.
    static func run(loops: Loops, identities: Identities, samples: Int) async throws -> [Double] {
        let server = try await LoopbackServer.start(group: loops.server, context: identities.server, handler: echo)
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
        let client = try await Loopback.connect(group: loops.client, context: identities.client, port: port)
        let channel = client.channel
        let began = ContinuousClock.now
        // Closing the channel ends the loop below with an error.
        let timer = channel.eventLoop.scheduleTask(in: deadline(samples: samples)) { channel.close(promise: nil) }
        defer { timer.cancel() }
        do {
            return try await rounds(client, samples: samples)
        } catch {
            if ContinuousClock.now - began >= .nanoseconds(deadline(samples: samples).nanoseconds) { throw overdue(samples) }
            throw error
        }
    }

    private static func rounds(_ client: MessageChannel, samples: Int) async throws -> [Double] {
        try await client.executeThenClose { inbound, outbound in
            var replies = inbound.makeAsyncIterator()
            var times: [Double] = []
            times.reserveCapacity(samples)
            // The first round trips (the first completes the handshake) go uncounted: after
            // connecting they are slower, and would weigh on a short run's median. The same
            // number as multipeer-bench's.
            for index in 0..<(warmUp + samples) {
                let request = probe(index)
                let start = ContinuousClock.now
                try await outbound.write(request)
                guard let reply = try await replies.next() else { throw LoopbackError("the server closed during round trips") }
                guard reply == request else { throw LoopbackError("echo \(index) does not match its request") }
                if index >= warmUp { times.append(seconds(ContinuousClock.now - start) * 1e6) }
            }
            return times
        }
    }
}
