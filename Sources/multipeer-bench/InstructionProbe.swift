import MultipeerConnectivity

/// One scenario run once, for an instruction count under callgrind (scripts/bench-instructions).
/// The script runs each probe at two sizes and divides the difference, so the fixed costs
/// (process start, identities, connecting) cancel out and only the per-unit work remains.
enum InstructionProbe: String, CaseIterable {
    case bulkRequired = "bulk-required"
    case bulkNone = "bulk-none"
    case roundTripTask = "round-trip-task"
    case roundTripNetworkThread = "round-trip-network-thread"
    /// The floors, from Baselines: OpenSSL's TLS 1.3 alone, raw TCP, and a raw TCP ping-pong.
    case openSSLBulk = "openssl-bulk"
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
            _ = try await Scenarios.roundTrips(pair, samples: size, mode: .reliable)
            await pair.close()
        case .roundTripNetworkThread:
            let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
            _ = await Scenarios.roundTripsOnNetworkThreads(pair, samples: size, mode: .reliable)
            await pair.close()
        case .openSSLBulk:
            _ = Baselines.tlsBulk(bytes: size << 20, server: pki.a, client: pki.b, anchor: pki.root)
        case .tcpBulk:
            _ = Baselines.tcpBulk(bytes: size << 20)
        case .tcpRoundTrip:
            _ = Baselines.tcpPingPong(samples: size, size: 64)
        }
    }
}
