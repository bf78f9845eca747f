import Foundation

/// Command-line options, parsed by hand: this package depends on swift-nio and swift-nio-ssl only.
struct Options {
    var quick = false
    var json: String?
    var only: [String] = []
    var certificates: String?
    /// multipeer-bench's exported identities instead of the test PKI.
    var identities: String?
    var repetitions: Int?
    var bulkMiB: Int?
    var roundTrips: Int?
    var establishments: Int?
    /// One handshake with the library instead of the benchmarks (TLSPeer).
    var tlsPeer: TLSPeer.Role?
    var port: Int?
    var alpn = "mpcp/1"
    var curves: String?

    static let groups = ["bulk", "latency", "establishment"]

    static let usage = """
        usage: nio-ssl-bench [--quick] [--json FILE] [--only bulk|latency|establishment]...
                             [--certificates DIR | --identities DIR] [--curves A:B]
                             [--repetitions N] [--bulk-mib N] [--round-trips N] [--establishments N]
               nio-ssl-bench --tls-peer client|server [--port N] [--alpn PROTOCOL] [--curves A:B]
                             [--certificates DIR | --identities DIR]

        TLS 1.3 over SwiftNIO and swift-nio-ssl on 127.0.0.1, mutual authentication with the
        Certificates/ test identities, or with --identities those multipeer-bench
        --export-identities wrote (root.pem; a serves, b connects); the baseline for
        multipeer-bench (scripts/bench-compare, scripts/bench-establishment).
        Defaults: 5 repetitions, 1024 MiB bulk, 20000 round trips, 200 establishments;
        --quick: 3, 64, 2000, 40. latency makes that many round trips twice a repetition: from
        Swift tasks (NIOAsyncChannel) and from channel handlers on the event loops.
        --curves (e.g. X25519MLKEM768:x25519:secp256r1) replaces swift-nio-ssl's default groups
        on both sides; establishment reports the group chosen.

        --tls-peer: one TLS 1.3 handshake with the library on 127.0.0.1 (scripts/pq-interop),
        after MPCP's preamble; the server listens on a port of its own and prints LISTENING
        <port>, the client dials --port; both print HANDSHAKE <alpn> once it completes and close.
        ALPN default mpcp/1.
        """

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var rest = arguments[...]
        func value(_ flag: String) throws -> String {
            guard let next = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
            return next
        }
        func count(_ flag: String) throws -> Int {
            guard let number = Int(try value(flag)), number > 0 else { throw UsageError("\(flag) needs a positive integer") }
            return number
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--quick": options.quick = true
            case "--json": options.json = try value(argument)
            case "--only":
                let group = try value(argument)
                guard groups.contains(group) else { throw UsageError("--only takes \(groups.joined(separator: ", "))") }
                options.only.append(group)
            case "--certificates": options.certificates = try value(argument)
            case "--identities": options.identities = try value(argument)
            case "--repetitions": options.repetitions = try count(argument)
            case "--bulk-mib": options.bulkMiB = try count(argument)
            case "--round-trips": options.roundTrips = try count(argument)
            case "--establishments": options.establishments = try count(argument)
            case "--tls-peer":
                guard let role = TLSPeer.Role(rawValue: try value(argument)) else { throw UsageError("--tls-peer takes client or server") }
                options.tlsPeer = role
            case "--port":
                guard let port = Int(try value(argument)), (1...65_535).contains(port) else { throw UsageError("--port needs a port") }
                options.port = port
            case "--alpn": options.alpn = try value(argument)
            case "--curves": options.curves = try value(argument)
            case "-h", "--help":
                print(usage)
                exit(0)
            default: throw UsageError("unknown argument \(argument)")
            }
        }
        guard options.certificates == nil || options.identities == nil else { throw UsageError("--certificates and --identities exclude each other") }
        return options
    }

    func wants(_ group: String) -> Bool { only.isEmpty || only.contains(group) }
}

struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Sizes and counts for one run.
struct Plan {
    let repetitions: Int
    let bulkBytes: Int
    let roundTrips: Int
    let establishments: Int

    init(_ options: Options) {
        repetitions = options.repetitions ?? (options.quick ? 3 : 5)
        bulkBytes = (options.bulkMiB ?? (options.quick ? 64 : 1024)) << 20
        roundTrips = options.roundTrips ?? (options.quick ? 2_000 : 20_000)
        establishments = options.establishments ?? (options.quick ? 40 : 200)
    }
}
