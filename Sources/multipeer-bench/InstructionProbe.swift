import Foundation
import MultipeerConnectivity

/// One scenario run once, for an instruction count under callgrind (scripts/bench-instructions).
/// The script runs each probe at two sizes and divides the difference, so the fixed costs
/// (process start, identities, connecting) cancel out and only the per-unit work remains.
enum InstructionProbe: String, CaseIterable {
    case bulkRequired = "bulk-required"
    case bulkNone = "bulk-none"
    case roundTripTask = "round-trip-task"
    case roundTripNetworkThread = "round-trip-network-thread"
    /// 1,200 B unreliable messages, sealed, received on the network thread; paced so that
    /// none is lost (a lost one would not be counted on the receiving side).
    case datagrams = "datagrams-1200"
    /// 64 B reliable messages in bursts of 100, each burst sent once the previous one arrived;
    /// the size counts bursts. Encrypted and not, for what TLS costs small messages.
    case smallRequired = "small-required"
    case smallNone = "small-none"
    /// Sessions connected: mutual TLS, trust callbacks, both sides `connected`.
    case establishment = "establishment"
    /// The floors, from Baselines: OpenSSL's TLS 1.3 alone, raw TCP, and a raw TCP ping-pong.
    case openSSLBulk = "openssl-bulk"
    case openSSLHandshakes = "openssl-handshakes"
    case tcpBulk = "tcp-bulk"
    case tcpRoundTrip = "tcp-round-trip"

    /// `size`: MiB for bulk, round trips for the others.
    func run(size: Int, pki: BenchPKI) async throws {
        switch self {
        case .bulkRequired, .bulkNone:
            let encrypted = self == .bulkRequired
            let pair = try await SessionPair.connect(preference: encrypted ? .required : .none, identities: encrypted ? (pki.a, pki.b) : nil)
            _ = try await Scenarios.bulk(pair, bytes: size << 20)
            await pair.close()
        case .roundTripTask:
            let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
            _ = await Scenarios.roundTrips(pair, samples: size, mode: .reliable, onNetworkThreads: false)
            await pair.close()
        case .roundTripNetworkThread:
            let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
            _ = await Scenarios.roundTrips(pair, samples: size, mode: .reliable, onNetworkThreads: true)
            await pair.close()
        case .datagrams:
            let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
            try await Self.paced(pair, count: size, size: 1200, mode: .unreliable, batch: 16)
            await pair.close()
        case .smallRequired, .smallNone:
            let encrypted = self == .smallRequired
            let pair = try await SessionPair.connect(preference: encrypted ? .required : .none, identities: encrypted ? (pki.a, pki.b) : nil)
            try await Self.paced(pair, count: size * 100, size: 64, mode: .reliable, batch: 100)
            await pair.close()
        case .establishment:
            _ = try await Scenarios.establishments(count: size, identities: (pki.a, pki.b), anchor: pki.root)
        case .openSSLHandshakes:
            _ = try Baselines.tlsHandshakes(count: size, server: pki.a, client: pki.b, anchor: pki.root)
        case .openSSLBulk:
            _ = Baselines.tlsBulk(bytes: size << 20, server: pki.a, client: pki.b, anchor: pki.root)
        case .tcpBulk:
            _ = Baselines.tcpBulk(bytes: size << 20)
        case .tcpRoundTrip:
            _ = Baselines.tcpPingPong(samples: size, size: 64)
        }
    }

    /// Sends `count` messages in batches, each once the previous one arrived (no polling, which
    /// callgrind would count); a batch that does not arrive within 10 s ends the probe.
    private static func paced(_ pair: SessionPair, count: Int, size: Int, mode: MCSessionSendDataMode, batch: Int) async throws {
        let (arrivals, arrived) = AsyncStream.makeStream(of: Int.self)
        let events = pair.aEvents
        let receiver = Task(executorPreference: pair.a.taskExecutor) {
            var received = 0
            for await event in events {
                guard case .dataReceived = event else { continue }
                received += 1
                if received % batch == 0 || received == count { arrived.yield(received) }
            }
        }
        defer { receiver.cancel() }
        let message = Data(repeating: 0x5A, count: size)
        var iterator = arrivals.makeAsyncIterator()
        for first in stride(from: 0, to: count, by: batch) {
            for _ in first..<min(first + batch, count) {
                try pair.b.send(message, toPeers: [pair.a.myPeerID], with: mode)
            }
            let timeout = Task {
                try await Task.sleep(for: .seconds(10))
                arrived.yield(-1)
            }
            let reached = await iterator.next()
            timeout.cancel()
            guard let reached, reached >= 0 else {
                print("\(mode == .reliable ? "messages" : "datagrams"): a batch did not arrive; the count is off")
                return
            }
        }
    }
}
