import Foundation
import MultipeerConnectivity
import Synchronization

/// Streams and resources through the public API (docs/PROTOCOL.md §7.6, §7.8).
enum ChannelScenarios {
    /// A file of `bytes` under the temporary directory, made once per run.
    static func sourceFile(bytes: Int) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("multipeer-bench-\(getpid())-\(bytes).bin")
        if (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) == bytes { return url }
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var block = Data(count: 1 << 20)
        for index in block.indices { block[index] = UInt8(truncatingIfNeeded: index &* 131 &+ 7) }
        for start in stride(from: 0, to: bytes, by: block.count) { handle.write(block.prefix(min(block.count, bytes - start))) }
        return url
    }

    /// Waits for `a` to receive a resource and removes the file; true when it arrived verified.
    /// Runs on `executor`, the receiving session's network thread.
    private static func receiveOne(_ events: MCSession.Events, on executor: any TaskExecutor) -> Task<Bool, Never> {
        Task(executorPreference: executor) {
            for await event in events {
                guard case .resourceReceived(_, _, let result) = event else { continue }
                if case .success(let url) = result { try? FileManager.default.removeItem(at: url) }
                if case .success = result { return true } else { return false }
            }
            return false
        }
    }

    /// Bytes per second of one resource from b to a (sent, verified, stored), and the peak
    /// resident memory growth of the process (both sides) meanwhile. Each side's tasks run on its
    /// network thread.
    static func resource(_ pair: SessionPair, file: URL, bytes: Int) async throws -> (rate: Double, peakKiB: Int) {
        let arrived = receiveOne(pair.a.events(), on: pair.a.taskExecutor)
        let (a, b) = (pair.a, pair.b)
        let before = Memory.residentKiB
        Memory.resetPeak()
        let elapsed = try await Clock.seconds {
            try await Task(executorPreference: b.taskExecutor) {
                try await b.sendResource(at: file, named: "bench.bin", to: a.myPeerID)
            }.value
            guard await arrived.value else { throw BenchTimeout() }
        }
        return (Double(bytes) / elapsed, max(0, Memory.peakResidentKiB - before))
    }

    /// Bytes per second of one stream from b to a, written in 1 MiB pieces and read as it comes,
    /// each side on its network thread.
    static func stream(_ pair: SessionPair, bytes: Int) async throws -> Double {
        let events = pair.a.events()
        let (a, b) = (pair.a, pair.b)
        let reading = Task(executorPreference: a.taskExecutor) { () -> Int in
            for await event in events {
                guard case .streamReceived(let reader, _) = event else { continue }
                var total = 0
                do {
                    for try await chunk in reader { total += chunk.count }
                } catch {
                    return -1
                }
                return total
            }
            return -1
        }
        let piece = Data(repeating: 0x3C, count: 1 << 20)
        let elapsed = try await Clock.seconds {
            try await Task(executorPreference: b.taskExecutor) {
                let writer = try b.openStream(named: "bench", to: a.myPeerID)
                for start in stride(from: 0, to: bytes, by: piece.count) { try await writer.write(piece.prefix(min(piece.count, bytes - start))) }
                writer.close()
            }.value
            guard await reading.value == bytes else { throw BenchTimeout() }
        }
        return Double(bytes) / elapsed
    }

    /// Round trips of 64 B reliable messages, in microseconds, while b sends a resource of
    /// `file` to a over the same connection; sampling stops when the transfer ends.
    static func latencyDuringTransfer(_ pair: SessionPair, file: URL, samples: Int) async throws -> [Double] {
        let bPeer = pair.b.myPeerID
        let a = pair.a
        let aEvents = a.events()
        let arrived = Mutex(false)
        let echo = Task {
            for await event in aEvents {
                switch event {
                case .dataReceived(let data, _): try? a.send(data, toPeers: [bPeer], with: .reliable)
                case .resourceReceived(_, _, let result):
                    if case .success(let url) = result { try? FileManager.default.removeItem(at: url) }
                    arrived.withLock { $0 = true }
                default: break
                }
            }
        }
        defer { echo.cancel() }
        let transfer = Task { try await pair.b.sendResource(at: file, named: "bench.bin", to: pair.a.myPeerID) }
        // Measure once bulk data flows, not during the offer's round trip.
        try await Task.sleep(for: .milliseconds(100))
        // As in Scenarios.roundTrips: one task sends each probe and awaits its echo itself.
        let times = await Scenarios.probe(from: pair.b, pair.b.events(), to: pair.a.myPeerID, samples: samples, mode: .reliable,
                                          executor: nil, stop: { arrived.withLock { $0 } })
        try await transfer.value
        return times
    }
}
