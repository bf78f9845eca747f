import Foundation

@main
enum NIOSSLBench {
    static func main() async {
        do {
            try await run(Options.parse(Array(CommandLine.arguments.dropFirst())))
        } catch {
            FileHandle.standardError.write(Data("nio-ssl-bench: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run(_ options: Options) async throws {
        if let role = options.tlsPeer {
            let identities = try Identities.load(options, applicationProtocols: [options.alpn])
            try await TLSPeer.run(role: role, port: options.port, identities: identities)
            return
        }
        let plan = Plan(options)
        let identities = try Identities.load(options)
        let loops = Loops()
        print("nio-ssl-bench \(options.quick ? "--quick" : "(full)"): \(plan.repetitions) repetitions, medians; swift-nio-ssl (BoringSSL), TLS 1.3, 127.0.0.1")
        print("identities: \(identities.description); groups: \(options.curves ?? "swift-nio-ssl's default")")
        var figures: [Figure] = []
        do {
            if options.wants("bulk") {
                var rates: [Double] = []
                for _ in 0..<plan.repetitions {
                    rates.append(try await Bulk.run(loops: loops, identities: identities, bytes: plan.bulkBytes) / 1e6)
                }
                figures.append(Figure(key: "bulk", scenario: "1 bulk, 1 MiB length-prefixed messages (\(plan.bulkBytes >> 20) MiB)",
                                      unit: "MB/s", stats: Stats(rates), p99: nil, note: nil))
            }
            if options.wants("latency") {
                // Each repetition runs both: the application code in tasks, then in handlers.
                var tasks = RoundTripFigures()
                var handlers = RoundTripFigures()
                for _ in 0..<plan.repetitions {
                    tasks.add(try await RoundTrip.run(loops: loops, identities: identities, samples: plan.roundTrips))
                    handlers.add(try await EventLoopRoundTrip.run(loops: loops, identities: identities, samples: plan.roundTrips))
                }
                figures.append(tasks.figure(key: "roundtrip", scenario: "3 round trip, 64 B, Swift task awaiting each echo",
                                            note: "\(plan.roundTrips) round trips per repetition; server echoes from a task"))
                figures.append(handlers.figure(key: "roundtrip-event-loop", scenario: "3 round trip, 64 B, event-loop handlers",
                                               note: "\(plan.roundTrips) round trips per repetition; each sent from the previous echo's channelRead"))
            }
            if options.wants("establishment") {
                var rates: [Double] = []
                for _ in 0..<plan.repetitions {
                    rates.append(try await Establishment.run(loops: loops, identities: identities, count: plan.establishments))
                }
                // One more connection, untimed, to read the group the server chose.
                let group = try await Establishment.keyExchangeGroup(loops: loops, identities: identities)
                figures.append(Figure(key: "establishment", scenario: "5 establishment: connect, mutual TLS 1.3, first echo",
                                      unit: "per s", stats: Stats(rates), p99: nil,
                                      note: "\(plan.establishments) connections per repetition; group \(group)",
                                      keyExchangeGroup: group))
            }
        } catch {
            await loops.shutdown()
            throw error
        }
        await loops.shutdown()
        Report.print(figures)
        if let path = options.json {
            try Report.write(Document(date: ISO8601DateFormatter().string(from: Date()), quick: options.quick,
                                      repetitions: plan.repetitions, results: figures,
                                      identities: identities.description, curves: options.curves), to: path)
            print("wrote \(path)")
        }
    }
}
