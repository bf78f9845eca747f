import ArgumentParser
import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import Synchronization

@main
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "multipeer-bench",
        abstract: "Measures swift-multipeer against baselines run in the same process, on loopback.",
        discussion: """
            Every figure is reported next to a baseline measured in the same run (blocking POSIX
            sockets, OpenSSL alone, libsodium alone), as a ratio where higher is better, because
            absolute numbers drift on shared machines. Build with -c release. For stable latency,
            pin the process to one CPU: taskset -c 0 multipeer-bench --only latency.
            """)

    @Flag(help: "A short run (under 2 minutes) with smaller sizes and fewer repetitions.")
    var quick = false

    @Option(help: "Write the results as JSON to this file.")
    var json: String?

    @Option(help: "Run only these groups (repeatable): bulk, small, latency, datagrams, establishment, channels, mesh, memory, flood.")
    var only: [String] = []

    @Option(help: .hidden)
    var floodVictim: String?

    @Flag(help: "Skip the baselines and print the library's figures alone, e.g. to profile the library.")
    var noBaselines = false

    @Option(help: "Run one scenario once, to count its instructions (scripts/bench-instructions): \(InstructionProbe.allCases.map(\.rawValue).joined(separator: ", ")).")
    var probe: String?

    @Option(help: "The probe's size: MiB for bulk, bursts of 100 for small messages, round trips or datagrams for the others (1 to 4096).")
    var probeSize = 16

    @Option(help: "The identities' key type, root and leaves alike: ed25519 (the default) or p256.")
    var keyType: BenchKeyType?

    @Option(help: "Write a root and identities a and b as PEM to this directory (\(BenchPKI.files.joined(separator: ", "))), then stop.")
    var exportIdentities: String?

    @Option(help: "Use the root and identities a and b that --export-identities wrote to this directory (nio-ssl-bench --identities takes the same).")
    var identities: String?

    func validate() throws {
        if let probe, InstructionProbe(rawValue: probe) == nil { throw ValidationError("unknown probe \(probe)") }
        guard (1...4096).contains(probeSize) else { throw ValidationError("--probe-size \(probeSize): 1 to 4096") }
        if exportIdentities != nil && identities != nil { throw ValidationError("--export-identities and --identities exclude each other") }
    }

    /// The given identities, checked against --key-type when both are given, or new ones.
    func makePKI() throws -> BenchPKI {
        guard let identities else { return try BenchPKI(keyType: keyType ?? .ed25519) }
        let pki = try BenchPKI.load(from: identities)
        if let keyType, keyType != pki.keyType {
            throw ValidationError("--key-type \(keyType.rawValue), but the identities in \(identities) are \(pki.keyType.label)")
        }
        return pki
    }

    /// A baseline measurement, unless baselines are skipped.
    func baseline<T>(_ measure: () throws -> T) rethrows -> T? { noBaselines ? nil : try measure() }

    /// A synchronous main that waits for the async work: valgrind (scripts/bench-instructions)
    /// crashes on the async main's dispatch_main, not on tasks started from a plain thread.
    func run() throws {
        let outcome = Mutex<Swift.Result<Void, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Swift.Result<Void, any Error>
            do {
                try await measure()
                result = .success(())
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        try outcome.withLock { $0 }!.get()
    }

    func measure() async throws {
        if let floodVictim { try await Flood.serveVictim(dialers: floodVictim.split(separator: ",").map(String.init)) }
        if let exportIdentities {
            try BenchPKI.export(keyType: keyType ?? .ed25519, to: exportIdentities)
            return print("wrote \((keyType ?? .ed25519).label) identities to \(exportIdentities)")
        }
        let plan = Plan(quick: quick)
        let pki = try makePKI()
        if let probe = probe.flatMap(InstructionProbe.init(rawValue:)) {
            return try await probe.run(size: probeSize, pki: pki)
        }
        var results: [Result] = []
        func wants(_ group: String) -> Bool { only.isEmpty || only.contains(group) }
        print("multipeer-bench \(quick ? "--quick" : "(full)"): \(plan.repetitions) repetitions, medians; \(CryptoRuntime.openSSLVersion)")

        if wants("bulk") {
            var tlsRates: [Double] = []
            var tcpRates: [Double] = []
            var rates: [Double] = []
            var plainRates: [Double] = []
            var peaks: [Double] = []
            var encryptedCPU = SideSamples()
            var plainCPU = SideSamples()
            var sealing: [Double] = []
            var opening: [Double] = []
            let threads = SideThreads.pair
            // Each repetition runs the baselines, the cipher alone, then the encrypted and the
            // plaintext pair, so drift on a shared machine hits all of them alike; ratios are
            // taken per repetition.
            for _ in 0..<plan.repetitions {
                if !noBaselines {
                    tlsRates.append(Baselines.tlsBulk(bytes: plan.bulkBytes, server: pki.a, client: pki.b, anchor: pki.root) / 1e6)
                    tcpRates.append(Baselines.tcpBulk(bytes: plan.bulkBytes) / 1e6)
                }
                let cipher = try CipherCost.measure(bytes: min(plan.bulkBytes, 256 << 20))
                sealing.append(cipher.seal)
                opening.append(cipher.open)
                let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b), threads: threads)
                let ((rate, peak), cpu) = try await SideCPU.measure(threads) { try await Scenarios.bulk(pair, bytes: plan.bulkBytes) }
                rates.append(rate / 1e6)
                peaks.append(Double(peak) / 1024)
                encryptedCPU.append(cpu, bytes: plan.bulkBytes)
                await pair.close()
                let plain = try await SessionPair.connect(preference: .none, identities: nil, threads: threads)
                let (plainRate, plainSides) = try await SideCPU.measure(threads) { try await Scenarios.bulk(plain, bytes: plan.bulkBytes).rate }
                plainRates.append(plainRate / 1e6)
                plainCPU.append(plainSides, bytes: plan.bulkBytes)
                await plain.close()
            }
            let library = Stats(rates)
            let tls = noBaselines ? nil : Stats(tlsRates)
            let tlsRatios = noBaselines ? nil : pairedRatios(rates, tlsRates)
            results.append(Result(scenario: "1 reliable bulk, 1 MiB messages (\(plan.bulkBytes >> 20) MiB)", unit: "MB/s", library: library,
                                  baselineName: "OpenSSL TLS 1.3, 16 KiB records", baseline: tls, ratio: tlsRatios?.median,
                                  target: ">= 0.9", met: tlsRatios.map { $0.median >= 0.9 },
                                  note: noBaselines ? nil : String(format: "raw TCP: %.0f MB/s", Stats(tcpRates).median), ratios: tlsRatios,
                                  perSide: encryptedCPU.figures))
            let plain = Stats(plainRates)
            let plainRatios = pairedRatios(rates, plainRates)
            // Issue 31: encryption is judged by CPU per side against plaintext plus the cipher (below).
            results.append(Result(scenario: "1 reliable bulk, encrypted against plaintext (.required / .none)", unit: "MB/s", library: library,
                                  baselineName: "the library with encryption .none", baseline: plain, ratio: plainRatios.median,
                                  target: "report", met: nil, note: nil, ratios: plainRatios, perSide: plainCPU.figures))
            results.append(Result(scenario: "1 AES-128-GCM alone, 16 KiB records: seal (open in note)", unit: "µs/MiB", library: Stats(sealing),
                                  baselineName: nil, baseline: nil, ratio: nil, target: "report", met: nil,
                                  note: String(format: "open %.0f µs/MiB (%.0f–%.0f); TLSRecordProtection on one thread, CPU clock",
                                               Stats(opening).median, Stats(opening).min, Stats(opening).max)))
            for (side, encrypted, clear, cipher) in [("sender", encryptedCPU.sender, plainCPU.sender, sealing),
                                                     ("receiver", encryptedCPU.receiver, plainCPU.receiver, opening)] {
                // Per repetition: the bound is that repetition's plaintext plus 1.1 times its cipher.
                let bounds = zip(clear, cipher).map { $0 + 1.1 * $1 }
                let ratios = pairedRatios(bounds, encrypted)
                results.append(Result(
                    scenario: "1 bulk CPU per MiB, \(side), encrypted", unit: "µs/MiB", library: Stats(encrypted),
                    baselineName: "plaintext + 1.1 x \(side == "sender" ? "sealing" : "opening"), same repetition", baseline: Stats(bounds),
                    ratio: ratios.median, target: "<= plaintext + 1.1 x cipher", met: ratios.median >= 1,
                    note: String(format: "plaintext %.0f µs/MiB, cipher %.0f µs/MiB; encrypted - plaintext = %.2f x cipher",
                                 Stats(clear).median, Stats(cipher).median,
                                 (Stats(encrypted).median - Stats(clear).median) / max(Stats(cipher).median, 1)),
                    ratios: ratios))
            }
            // Both sides together: loopback TCP input lands on whichever side's thread takes it,
            // which moves CPU time between the sides from run to run, not in their sum.
            let bothBounds = zip(plainCPU.both, zip(sealing, opening)).map { $0 + 1.1 * ($1.0 + $1.1) }
            let bothRatios = pairedRatios(bothBounds, encryptedCPU.both)
            results.append(Result(
                scenario: "1 bulk CPU per MiB, both sides, encrypted", unit: "µs/MiB", library: Stats(encryptedCPU.both),
                baselineName: "plaintext + 1.1 x (sealing + opening), same repetition", baseline: Stats(bothBounds),
                ratio: bothRatios.median, target: "<= plaintext + 1.1 x cipher", met: bothRatios.median >= 1,
                note: String(format: "plaintext %.0f µs/MiB, cipher %.0f µs/MiB; user-mode encrypted %.0f, plaintext %.0f",
                             Stats(plainCPU.both).median, Stats(zip(sealing, opening).map { $0 + $1 }).median,
                             Stats(zip(encryptedCPU.senderUser, encryptedCPU.receiverUser).map { $0 + $1 }).median,
                             Stats(zip(plainCPU.senderUser, plainCPU.receiverUser).map { $0 + $1 }).median),
                ratios: bothRatios))
            let peak = Stats(peaks)
            results.append(Result(scenario: "7 peak RSS growth while sending \(plan.bulkBytes >> 20) MiB", unit: "MiB", library: peak,
                                  baselineName: nil, baseline: nil, ratio: nil, target: "< 64 MiB", met: peak.median < 64, note: nil))
            print("CPU per side: \(threads.sender.description); \(threads.receiver.description). " + SideThreads.counted)
        }

        if wants("small") {
            var rates: [MCEncryptionPreference: [Double]] = [.required: [], .none: []]
            var delegateRates: [Double] = []
            // Encrypted, plaintext and to a delegate alternate, so drift hits all alike.
            for _ in 0..<plan.repetitions {
                for preference in [MCEncryptionPreference.required, .none] {
                    let pair = try await SessionPair.connect(preference: preference, identities: preference == .required ? (pki.a, pki.b) : nil)
                    rates[preference, default: []].append(try await Scenarios.smallMessages(pair, count: plan.smallMessages))
                    await pair.close()
                }
                delegateRates.append(try await Scenarios.smallMessagesToDelegate(count: plan.smallMessages, identities: (pki.a, pki.b)))
            }
            for preference in [MCEncryptionPreference.required, .none] {
                results.append(Result(scenario: "2 reliable 64 B messages, \(preference == .required ? "required" : "none")", unit: "msg/s",
                                      library: Stats(rates[preference] ?? []), baselineName: nil, baseline: nil, ratio: nil, target: "report", met: nil, note: nil))
            }
            let ratios = pairedRatios(rates[.required] ?? [], rates[.none] ?? [])
            results.append(Result(scenario: "2 reliable 64 B messages, encrypted against plaintext", unit: "msg/s",
                                  library: Stats(rates[.required] ?? []), baselineName: "the library with encryption .none",
                                  baseline: Stats(rates[.none] ?? []), ratio: ratios.median, target: "report", met: nil, note: nil, ratios: ratios))
            // Apple's delegate instead of events(), against events() in the same repetitions.
            let delegateRatios = pairedRatios(delegateRates, rates[.required] ?? [])
            results.append(Result(scenario: "2 reliable 64 B messages, required, to a delegate", unit: "msg/s",
                                  library: Stats(delegateRates), baselineName: "the same to an events() task",
                                  baseline: Stats(rates[.required] ?? []), ratio: delegateRatios.median, target: "report", met: nil,
                                  note: nil, ratios: delegateRatios))
        }

        if wants("latency") {
            let pingPong = baseline { Baselines.tcpPingPong(samples: plan.roundTrips, size: 64) }
            // Two ways an application can take events: a task on the global executor (the
            // default), or a task that prefers the session's task executor (no thread hop).
            for onNetworkThread in [false, true] {
                for mode in [MCSessionSendDataMode.reliable, .unreliable] {
                    let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
                    let times = await Scenarios.roundTrips(pair, samples: plan.roundTrips, mode: mode, onNetworkThreads: onNetworkThread)
                    await pair.close()
                    let library = Stats(times)
                    let ratio = pingPong.map { percentile($0, 0.5) / library.median }
                    let path = onNetworkThread ? ", network thread" : ", events task"
                    results.append(Result(scenario: "3 round trip, 64 B \(mode == .reliable ? "reliable" : "unreliable")\(path)", unit: "µs median",
                                          library: library, baselineName: "raw TCP ping-pong", baseline: pingPong.map(Stats.init), ratio: ratio,
                                          // Round 2: 2x raw TCP on the network thread, 3x from an ordinary task.
                                          target: mode == .reliable ? (onNetworkThread ? "<= 2x (ratio >= 0.5)" : "<= 3x (ratio >= 0.33)") : "report",
                                          met: mode == .reliable ? ratio.map { $0 >= (onNetworkThread ? 0.5 : 1 / 3) } : nil,
                                          note: String(format: "p99 %.0f µs vs %.0f µs; %d of %d samples", percentile(times, 0.99),
                                                       percentile(pingPong ?? [], 0.99), times.count, plan.roundTrips)))
                }
            }
        }

        if wants("datagrams") {
            for size in [64, 1200] {
                var baselines: [(rate: Double, loss: Double)] = []
                var rates: [Bool: [Double]] = [false: [], true: []]
                var losses: [Bool: [Double]] = [false: [], true: []]
                var duplicates: [Bool: Int] = [false: 0, true: 0]
                // Each repetition runs raw UDP, then the library with the receiver's events taken
                // from an ordinary task and on its network thread; ratios are taken per repetition.
                for _ in 0..<plan.repetitions {
                    if !noBaselines { baselines.append(Baselines.udp(count: plan.datagrams, size: size)) }
                    for onNetworkThread in [false, true] {
                        let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
                        let outcome = try await Scenarios.datagrams(pair, count: plan.datagrams, size: size, onNetworkThread: onNetworkThread)
                        rates[onNetworkThread, default: []].append(outcome.rate)
                        losses[onNetworkThread, default: []].append(outcome.loss)
                        duplicates[onNetworkThread, default: 0] += outcome.duplicates
                        await pair.close()
                    }
                }
                let udp = noBaselines ? nil : Stats(baselines.map(\.rate))
                for onNetworkThread in [false, true] {
                    let library = Stats(rates[onNetworkThread] ?? [])
                    let ratios = noBaselines ? nil : pairedRatios(rates[onNetworkThread] ?? [], baselines.map(\.rate))
                    let seen = duplicates[onNetworkThread] ?? 0
                    let path = onNetworkThread ? ", network thread" : ", events task"
                    results.append(Result(scenario: "4 unreliable \(size) B datagrams delivered\(path)", unit: "pkt/s", library: library,
                                          baselineName: "raw UDP", baseline: udp, ratio: ratios?.median,
                                          target: size == 1200 ? ">= 0.8, no duplicates" : "report",
                                          met: size == 1200 ? ratios.map { $0.median >= 0.8 && seen == 0 } : nil,
                                          note: String(format: "loss %.1f%% (UDP %.1f%%), duplicates %d", Stats(losses[onNetworkThread] ?? []).median * 100,
                                                       Stats(baselines.map(\.loss)).median * 100, seen),
                                          ratios: ratios))
                }
            }
        }

        if wants("establishment") {
            var handshakes: [Double] = []
            var baselineGroup: String?
            var rates: [Double] = []
            var firstContactRates: [Double] = []
            for _ in 0..<plan.repetitions {
                if !noBaselines {
                    let run = try Baselines.tlsHandshakes(count: plan.establishments, server: pki.a, client: pki.b, anchor: pki.root)
                    handshakes.append(run.rate)
                    baselineGroup = run.group
                }
                rates.append(try await Scenarios.establishments(count: plan.establishments, identities: (pki.a, pki.b), anchor: pki.root))
                firstContactRates.append(try await Scenarios.establishments(
                    count: plan.establishments, identities: (pki.a, pki.b), anchor: pki.root, firstContact: true))
            }
            // One more, untimed, to read the group the sessions' handshake chose from their log.
            let group = try await Scenarios.establishmentGroup(identities: (pki.a, pki.b), anchor: pki.root)
            let library = Stats(rates)
            let ratios = noBaselines ? nil : pairedRatios(rates, handshakes)
            var note = "\(pki.keyType.label) root and leaves, no intermediate; group \(group ?? "unknown")"
            if !noBaselines { note += " (OpenSSL pair: \(baselineGroup ?? "unknown"))" }
            results.append(Result(scenario: "5 session establishment (mutual TLS, trust, connected)", unit: "per s", library: library,
                                  baselineName: "OpenSSL mutual-auth handshakes", baseline: noBaselines ? nil : Stats(handshakes), ratio: ratios?.median,
                                  target: ">= 0.9", met: ratios.map { $0.median >= 0.9 }, note: note, ratios: ratios,
                                  keyType: pki.keyType.rawValue, keyExchangeGroup: group, baselineKeyExchangeGroup: baselineGroup))
            // The same, with both chains verified afresh each time, as OpenSSL's pair does.
            let firstContactRatios = noBaselines ? nil : pairedRatios(firstContactRates, handshakes)
            results.append(Result(scenario: "5b first contact: establishment, chains verified afresh", unit: "per s", library: Stats(firstContactRates),
                                  baselineName: "OpenSSL mutual-auth handshakes", baseline: noBaselines ? nil : Stats(handshakes),
                                  ratio: firstContactRatios?.median, target: "report", met: nil, note: note, ratios: firstContactRatios,
                                  keyType: pki.keyType.rawValue, keyExchangeGroup: group, baselineKeyExchangeGroup: baselineGroup))
        }

        if wants("channels") {
            // Resources and streams against reliable bulk messages of the same size, same run.
            let file = try ChannelScenarios.sourceFile(bytes: plan.bulkBytes)
            defer { try? FileManager.default.removeItem(at: file) }
            let threads = SideThreads.pair
            var bulk: [Double] = []
            var resource: [Double] = []
            var resourcePeaks: [Double] = []
            var stream: [Double] = []
            var bulkCPU = SideSamples()
            var resourceCPU = SideSamples()
            var streamCPU = SideSamples()
            for _ in 0..<plan.repetitions {
                let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b), threads: threads)
                let (rate, bulkSides) = try await SideCPU.measure(threads) { try await Scenarios.bulk(pair, bytes: plan.bulkBytes).rate }
                bulk.append(rate / 1e6)
                bulkCPU.append(bulkSides, bytes: plan.bulkBytes)
                let ((fileRate, peak), fileSides) = try await SideCPU.measure(threads) {
                    try await ChannelScenarios.resource(pair, file: file, bytes: plan.bulkBytes)
                }
                resource.append(fileRate / 1e6)
                resourcePeaks.append(Double(peak) / 1024)
                resourceCPU.append(fileSides, bytes: plan.bulkBytes)
                let (streamRate, streamSides) = try await SideCPU.measure(threads) { try await ChannelScenarios.stream(pair, bytes: plan.bulkBytes) }
                stream.append(streamRate / 1e6)
                streamCPU.append(streamSides, bytes: plan.bulkBytes)
                await pair.close()
            }
            let messages = Stats(bulk)
            let files = Stats(resource)
            let streams = Stats(stream)
            let size = "\(plan.bulkBytes >> 20) MiB"
            let fileRatios = pairedRatios(resource, bulk)
            results.append(Result(scenario: "9 reliable bulk, 1 MiB messages, \(size), before the resource", unit: "MB/s", library: messages,
                                  baselineName: nil, baseline: nil, ratio: nil, target: "report", met: nil, note: nil,
                                  perSide: bulkCPU.figures))
            results.append(Result(scenario: "9 resource (file), \(size)", unit: "MB/s", library: files,
                                  baselineName: "reliable bulk 1 MiB messages, same run", baseline: messages,
                                  ratio: fileRatios.median, target: ">= 0.45", met: fileRatios.median >= 0.45, note: nil,
                                  ratios: fileRatios, perSide: resourceCPU.figures))
            for (side, files, messages) in [("sender", resourceCPU.sender, bulkCPU.sender), ("receiver", resourceCPU.receiver, bulkCPU.receiver)] {
                // Per repetition: the bound is 1.5 times that repetition's bulk on the same side.
                let bounds = messages.map { 1.5 * $0 }
                let ratios = pairedRatios(bounds, files)
                results.append(Result(
                    scenario: "9 resource CPU per MiB, \(side)", unit: "µs/MiB", library: Stats(files),
                    baselineName: "1.5 x reliable bulk's on this side, same repetition", baseline: Stats(bounds),
                    ratio: ratios.median, target: "<= 1.5 x bulk", met: ratios.median >= 1,
                    note: String(format: "bulk %.0f µs/MiB; resource / bulk = %.2f", Stats(messages).median,
                                 Stats(files).median / max(Stats(messages).median, 1)),
                    ratios: ratios))
            }
            results.append(Result(scenario: "9 peak RSS growth while a \(size) resource goes through (both sides)", unit: "MiB",
                                  library: Stats(resourcePeaks), baselineName: nil, baseline: nil, ratio: nil,
                                  target: "< 64 MiB", met: Stats(resourcePeaks).median < 64, note: nil))
            results.append(Result(scenario: "9 stream, 1 MiB writes, \(size)", unit: "MB/s", library: streams,
                                  baselineName: "reliable bulk 1 MiB messages, same run", baseline: messages,
                                  ratio: streams.median / messages.median, target: "report", met: nil, note: nil,
                                  perSide: streamCPU.figures))
            print("CPU per side: \(threads.sender.description); \(threads.receiver.description). " + SideThreads.counted)
            var latencies: [Double] = []
            for _ in 0..<plan.repetitions {
                let pair = try await SessionPair.connect(preference: .required, identities: (pki.a, pki.b))
                latencies += try await ChannelScenarios.latencyDuringTransfer(pair, file: file, samples: plan.roundTrips)
                await pair.close()
            }
            let p99 = percentile(latencies, 0.99) / 1000
            results.append(Result(scenario: "9 64 B round trip while a \(size) resource goes to the same peer, p99", unit: "ms",
                                  library: Stats([p99]), baselineName: nil, baseline: nil, ratio: nil, target: "< 5 ms",
                                  met: p99 < 5, note: String(format: "p50 %.2f ms, %d samples", percentile(latencies, 0.5) / 1000, latencies.count)))
        }

        if wants("mesh") {
            var times: [Double] = []
            for _ in 0..<plan.repetitions { times.append(try await Scenarios.meshFormation(identities: pki.eight) * 1000) }
            let library = Stats(times)
            results.append(Result(scenario: "6 8-peer full mesh formation", unit: "ms", library: library, baselineName: nil, baseline: nil,
                                  ratio: nil, target: "< 250 ms", met: library.median < 250, note: nil))
            // Fan-out: one sender to the rest, as the mesh grows; the two-member figure is the
            // baseline, so the ratio shows what each added receiver costs the sender.
            let perReceiver = plan.bulkBytes / 4
            var single: Stats?
            for members in [2, 4, 8] {
                var rates: [Double] = []
                for _ in 0..<plan.repetitions {
                    rates.append(try await FanOut.rate(members: members, bytesPerReceiver: perReceiver, identities: pki.eight) / 1e6)
                }
                let library = Stats(rates)
                if members == 2 { single = library }
                results.append(Result(
                    scenario: "6 fan-out, 1 sender to \(members - 1), 1 MiB messages (\(perReceiver >> 20) MiB each), all receivers", unit: "MB/s",
                    library: library, baselineName: members == 2 ? nil : "1 sender to 1, same run", baseline: members == 2 ? nil : single,
                    ratio: members == 2 ? nil : single.map { library.median / $0.median }, target: "report", met: nil,
                    note: String(format: "%.0f MB/s per receiver", library.median / Double(members - 1))))
            }
        }

        if wants("memory") {
            let perPeer = try await Scenarios.idlePeerMemory(identities: pki.eight)
            results.append(Result(scenario: "7 memory per idle connected peer (heap)", unit: "KiB", library: Stats([perPeer.heapKiB]),
                                  baselineName: nil, baseline: nil, ratio: nil, target: "< 256 KiB", met: perPeer.heapKiB < 256,
                                  note: String(format: "8 sessions, 28 connections in one process; RSS growth %.1f KiB per peer", perPeer.residentKiB)))
            if let sodium = baseline({ Baselines.sodiumSealOpen(count: plan.datagrams, size: 1200) }) {
                results.append(Result(scenario: "- libsodium seal+open, 1200 B (reference)", unit: "op/s", library: Stats([sodium]),
                                      baselineName: nil, baseline: nil, ratio: nil, target: "report", met: nil, note: nil))
            }
        }

        if wants("flood") {
            let outcome = try await Flood.run(attackers: 2_000, window: plan.floodWindow, realPeers: plan.floodRealPeers)
            results.append(Result(
                scenario: "10 flood: victim's busiest thread, 1,024 open files, 2,000 attackers reconnecting as shed", unit: "cores",
                library: Stats([outcome.busiest]), baselineName: nil, baseline: nil, ratio: nil, target: "< 0.5",
                met: outcome.busiest < 0.5,
                note: "\(outcome.reconnects) attacker connects in \(plan.floodWindow)"))
            let times = Stats(outcome.connectTimes.map { $0 * 1000 })
            results.append(Result(
                scenario: "10 flood: a real peer connects through it (\(outcome.connectTimes.count) peers in turn)", unit: "ms",
                library: times, baselineName: nil, baseline: nil, ratio: nil, target: "< 1000 ms each",
                met: times.max < 1000, note: String(format: "slowest %.0f ms", times.max)))
        }

        Report.print(results)
        if let json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(Report.Document(date: ISO8601DateFormatter().string(from: Date()), quick: quick, results: results,
                                                   openSSL: CryptoRuntime.openSSLVersion))
                .write(to: URL(fileURLWithPath: json))
            print("wrote \(json)")
        }
    }
}

struct Plan {
    let repetitions: Int
    let bulkBytes: Int
    let smallMessages: Int
    let roundTrips: Int
    let datagrams: Int
    let establishments: Int
    let floodWindow: Duration
    let floodRealPeers: Int

    init(quick: Bool) {
        repetitions = quick ? 3 : 5
        bulkBytes = quick ? 64 << 20 : 1 << 30
        smallMessages = quick ? 20_000 : 200_000
        roundTrips = quick ? 300 : 3_000
        datagrams = quick ? 20_000 : 100_000
        establishments = quick ? 10 : 50
        floodWindow = quick ? .seconds(3) : .seconds(10)
        floodRealPeers = quick ? 3 : 10
    }
}

enum Report {
    struct Document: Codable {
        let date: String
        let quick: Bool
        let results: [Result]
        /// The linked OpenSSL's version text (nil in files from before it was recorded).
        var openSSL: String? = nil
    }

    static func print(_ results: [Result]) {
        Swift.print("")
        Swift.print(pad("scenario", 58) + pad("library", 16) + pad("baseline", 16) + pad("ratio", 8) + pad("target", 24) + "met")
        for result in results {
            let library = format(result.library.median) + " " + result.unit
            let baseline = result.baseline.map { format($0.median) } ?? "-"
            let ratio = result.ratio.map { String(format: "%.2f", $0) } ?? "-"
            let met = result.met.map { $0 ? "yes" : "NO" } ?? "-"
            Swift.print(pad(result.scenario, 58) + pad(library, 16) + pad(baseline, 16) + pad(ratio, 8) + pad(result.target, 24) + met)
            var details = String(format: "    spread %.0f%%", result.library.spread * 100)
            if let name = result.baselineName { details += "; baseline: \(name)" }
            if let ratios = result.ratios { details += String(format: "; ratio per repetition %.2f–%.2f", ratios.min, ratios.max) }
            if let note = result.note { details += "; \(note)" }
            if let perSide = result.perSide { details += "; \(perSide.note)" }
            Swift.print(details)
        }
    }

    static func format(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width - 1)) + " " : text + String(repeating: " ", count: width - text.count)
    }
}
