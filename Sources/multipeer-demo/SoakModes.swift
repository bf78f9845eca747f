import Foundation
import Logging
import MultipeerConnectivity
import Synchronization

/// `multipeer-demo soaker NAME`: one peer of `scripts/soak`, run inside a network namespace
/// whose links the script cuts and restores at random (docs/PROTOCOL.md §7.9). A line protocol
/// on standard input and output:
///   out `PEER <hex>`                    first, its peer ID
///   in  `MAKE <hex>`  out `DATA <hex> <data>`    connection data for that peer
///   in  `CONNECT <hex> <data>`          connect with connection data the other peer made
///   out `CONNECTED <n>`                 n peers connected (each time it changes)
///   in  `GO <interval-ms>`              send to every peer a numbered message every interval,
///                                       and every 50 intervals a 1 MiB stream and a 1 MiB file
///                                       to one of them, in turn
///   out `STATS fds=… threads=… rss=… sent=… received=… streams=ok/failed streamsout=ok/failed resources=ok/failed resourcesin=ok/failed`
///                                       once a second
///   out `NOTCONNECTED <hex>` / `VIOLATION <hex> <detail>`   a peer was reported gone, or its
///                                       messages arrived out of order or twice
///   in  `STOP`  out `SENT <hex> <n>` for each peer, then `STOPPED`
///   in  `EXPECT <hex> <n>`  out `CHECK <hex> ok|missing <k>` once n arrived, or after 30 s
///   end of input: disconnect and exit
extension Demo {
    /// Each soak stream: 1 MiB whose bytes depend on their position.
    static let streamLength = 1 << 20
    static func streamByte(at offset: Int) -> UInt8 { UInt8(truncatingIfNeeded: offset % 251) }
    static let streamContent = Data((0..<streamLength).map(streamByte(at:)))

    static func soaker(name: String) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("soak-\(getpid())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var configuration = MCSessionConfiguration()
        configuration.resourceDirectory = scratch.appendingPathComponent("in")
        // MULTIPEER_SOAK_LOG=1: the session's log (why links ended, recovered or gave up) on
        // standard error, for a soak that failed.
        if ProcessInfo.processInfo.environment["MULTIPEER_SOAK_LOG"] != nil {
            configuration.logger = Logger(label: name) { StreamLogHandler.standardError(label: $0) }
            configuration.logger.logLevel = .info
        }
        let session = MCSession(
            peer: MCPeerID(displayName: name), securityIdentity: nil, encryptionPreference: .required, configuration: configuration)
        let state = SoakState()
        let events = session.events()
        // The script may be gone (killed): a closed pipe ends the output, not the process.
        func say(_ line: String) { try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8)) }
        func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }
        func peer(_ text: Substring) throws -> MCPeerID {
            guard let bytes = hexBytes(String(text)) else { throw MCError(.invalidParameter, reason: "bad peer hex") }
            return try MCPeerID(wireRepresentation: Data(bytes))
        }
        say("PEER \(hex(session.myPeerID.wireRepresentation))")

        let watcher = Task {
            for await event in events {
                switch event {
                case .peerStateChanged(let other, .notConnected):
                    say("NOTCONNECTED \(hex(other.wireRepresentation))")
                    say("CONNECTED \(session.connectedPeers.count)")
                case .peerStateChanged(_, .connected):
                    say("CONNECTED \(session.connectedPeers.count)")
                case .dataReceived(let data, let from) where data.count == 8:
                    let index = data.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self).bigEndian }
                    if let violation = state.received(index, from: from) { say("VIOLATION \(hex(from.wireRepresentation)) \(violation)") }
                case .streamReceived(let reader, _):
                    Task {
                        // Across lost links (§7.10) too: every byte once, in order, so exactly
                        // the pattern that was sent (a byte out of place shows).
                        var count = 0
                        var intact = true
                        do {
                            for try await chunk in reader {
                                for byte in chunk {
                                    intact = intact && byte == Self.streamByte(at: count)
                                    count += 1
                                }
                            }
                            state.stream(ok: intact && count == Self.streamLength)
                        } catch {
                            state.stream(ok: false)
                        }
                    }
                case .resourceReceived(_, _, .success(let url)):
                    try? FileManager.default.removeItem(at: url)
                    state.resourceReceived(ok: true)
                case .resourceReceived(_, _, .failure):
                    state.resourceReceived(ok: false)
                default:
                    break
                }
            }
        }
        defer { watcher.cancel() }
        let stats = Task {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(1))
                say("STATS \(SoakState.processCounts()) \(state.summary)")
            }
        }
        defer { stats.cancel() }

        let input = LineReader()
        var sender: Task<Void, Never>?
        let file = scratch.appendingPathComponent("out.bin")
        try Data(repeating: 0x5A, count: 1 << 20).write(to: file)
        while let line = input.next() {
            let parts = line.split(separator: " ")
            switch parts.first {
            case "MAKE" where parts.count == 2:
                let other = try peer(parts[1])
                say("DATA \(parts[1]) \(hex(try await session.nearbyConnectionData(forPeer: other)))")
            case "CONNECT" where parts.count == 3:
                guard let data = hexBytes(String(parts[2])) else { fail("bad connection data") }
                try session.connect(to: try peer(parts[1]), nearbyConnectionData: Data(data))
            case "GO" where parts.count == 2:
                let interval = Int(parts[1]) ?? 50
                sender = Task {
                    var round = 0
                    while !Task.isCancelled {
                        let peers = session.connectedPeers.sorted { $0.displayName < $1.displayName }
                        for other in peers {
                            let index = state.nextIndex(to: other)
                            let bytes = withUnsafeBytes(of: index.bigEndian) { Data($0) }
                            do {
                                try await session.send(bytes, to: [other])
                                state.sent(to: other)
                            } catch {
                                state.unsent(to: other)
                            }
                        }
                        round += 1
                        if round % 50 == 0, !peers.isEmpty {
                            let target = peers[(round / 50) % peers.count]
                            Task { state.resource(ok: (try? await session.sendResource(at: file, named: "soak.bin", to: target)) != nil) }
                            Task {
                                do {
                                    let writer = try session.openStream(named: "soak", to: target)
                                    try await writer.write(Self.streamContent)
                                    try await writer.finish()
                                    state.streamSent(ok: true)
                                } catch {
                                    state.streamSent(ok: false)
                                }
                            }
                        }
                        try? await Task.sleep(for: .milliseconds(interval))
                    }
                }
            case "STOP":
                sender?.cancel()
                await sender?.value
                for (other, count) in state.sentCounts { say("SENT \(hex(other.wireRepresentation)) \(count)") }
                say("STOPPED")
            case "EXPECT" where parts.count == 3:
                let other = try peer(parts[1])
                let expected = UInt64(parts[2]) ?? 0
                let deadline = ContinuousClock.now + .seconds(30)
                while state.receivedCount(from: other) < expected, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                let missing = expected - min(expected, state.receivedCount(from: other))
                say("CHECK \(parts[1]) \(missing == 0 ? "ok" : "missing \(missing)")")
            default:
                say("UNKNOWN \(line)")
            }
        }
        await session.disconnectAndWait()
    }
}

/// What one soak peer counted, shared between its tasks.
final class SoakState: Sendable {
    private struct Counts {
        var next: [MCPeerID: UInt64] = [:]
        var unsent: [MCPeerID: UInt64] = [:]
        var received: [MCPeerID: UInt64] = [:]
        var streams = (ok: 0, failed: 0)
        var streamsSent = (ok: 0, failed: 0)
        var resources = (ok: 0, failed: 0)
        var resourcesReceived = (ok: 0, failed: 0)
    }
    private let counts = Mutex(Counts())

    /// The index of the next message to `peer`: messages sent so far, so a refused send's
    /// index is used again.
    func nextIndex(to peer: MCPeerID) -> UInt64 { counts.withLock { $0.next[peer, default: 0] } }

    func sent(to peer: MCPeerID) { counts.withLock { $0.next[peer, default: 0] += 1 } }

    func unsent(to peer: MCPeerID) { counts.withLock { $0.unsent[peer, default: 0] += 1 } }

    /// Messages carry consecutive indices per sender: one that does not go up by one is a
    /// duplicate, out of order, or follows a lost one.
    func received(_ index: UInt64, from peer: MCPeerID) -> String? {
        counts.withLock { counts in
            let expected = counts.received[peer, default: 0]
            counts.received[peer] = max(expected, index + 1)
            return index == expected ? nil : "index \(index) where \(expected) was due"
        }
    }

    func receivedCount(from peer: MCPeerID) -> UInt64 { counts.withLock { $0.received[peer, default: 0] } }

    var sentCounts: [(MCPeerID, UInt64)] {
        counts.withLock { counts in counts.next.map { ($0.key, $0.value) } }
    }

    func stream(ok: Bool) { counts.withLock { if ok { $0.streams.ok += 1 } else { $0.streams.failed += 1 } } }
    func streamSent(ok: Bool) { counts.withLock { if ok { $0.streamsSent.ok += 1 } else { $0.streamsSent.failed += 1 } } }
    func resource(ok: Bool) { counts.withLock { if ok { $0.resources.ok += 1 } else { $0.resources.failed += 1 } } }
    func resourceReceived(ok: Bool) {
        counts.withLock { if ok { $0.resourcesReceived.ok += 1 } else { $0.resourcesReceived.failed += 1 } }
    }

    var summary: String {
        counts.withLock { counts in
            "sent=\(counts.next.values.reduce(0, +)) unsent=\(counts.unsent.values.reduce(0, +)) received=\(counts.received.values.reduce(0, +)) "
                + "streams=\(counts.streams.ok)/\(counts.streams.failed) streamsout=\(counts.streamsSent.ok)/\(counts.streamsSent.failed) resources=\(counts.resources.ok)/\(counts.resources.failed) "
                + "resourcesin=\(counts.resourcesReceived.ok)/\(counts.resourcesReceived.failed)"
        }
    }

    /// Open descriptors, threads and resident memory of this process, from /proc.
    static func processCounts() -> String {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> String {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?.split(whereSeparator: \.isWhitespace).dropFirst().first.map(String.init) ?? "-1"
        }
        return "fds=\(fds) threads=\(field("Threads")) rss=\(field("VmRSS"))"
    }
}
