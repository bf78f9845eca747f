import Foundation
import MultipeerConnectivity
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix

/// Issue 28, hole 4: a session at the common limit of 1,024 open files, under 1,000 idle and
/// 1,000 trickling connections that reconnect as soon as they are shed. The victim runs in a
/// child process (this executable with `--flood-victim`), so its threads' CPU time is its own;
/// the attackers and the real peers run here.
enum Flood {
    struct Outcome {
        /// The victim's busiest thread, in cores, while the attackers reconnect.
        let busiest: Double
        /// Seconds from `connect` to connected, one per real peer, one after another.
        let connectTimes: [Double]
        /// Connects the attackers made during the measurement.
        let reconnects: Int
    }

    static let victimFileLimit: rlim_t = 1_024

    /// The child: one session serving connection data for each of `dialers` (hex peer IDs),
    /// until its standard input closes.
    static func serveVictim(dialers: [String]) async throws -> Never {
        var files = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        files.rlim_cur = victimFileLimit
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        let session = MCSession(peer: MCPeerID(displayName: "victim"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        var lines = ""
        for hex in dialers {
            let peer = try MCPeerID(wireRepresentation: Data(hexBytes(hex)))
            let data = try await session.nearbyConnectionData(forPeer: peer)
            lines += "DATA \(data.map { String(format: "%02x", $0) }.joined())\n"
        }
        lines += "PEER \(session.myPeerID.wireRepresentation.map { String(format: "%02x", $0) }.joined())\n"
        FileHandle.standardOutput.write(Data(lines.utf8))
        // The parent gone (its end of the pipe closed) means this process goes too.
        _ = FileHandle.standardInput.readDataToEndOfFile()
        withExtendedLifetime(session) {}
        exit(0)
    }

    static func run(attackers: Int, window: Duration, realPeers: Int) async throws -> Outcome {
        var files = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        files.rlim_cur = min(files.rlim_max, 16_384)
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        guard files.rlim_cur >= rlim_t(attackers + 1_024) else {
            throw FloodFailure(what: "raising the open-file limit to \(attackers + 1_024) (hard limit \(files.rlim_max))")
        }
        let sessions = (0..<realPeers).map { index in
            MCSession(peer: MCPeerID(displayName: "real\(index)"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        }
        let victim = try Victim(dialers: sessions.map(\.myPeerID))
        defer { victim.stop() }

        // Never shut down: connects still in flight at the end would be cut off mid-promise.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let attack = Attack(port: victim.port, group: group, preamble: ByteBuffer(), clientHello: ByteBuffer(), reopens: true)
        defer { attack.stop() }
        for index in 0..<attackers { attack.open(kind: index < attackers / 2 ? .idle : .trickling) }
        try await waitFor(seconds: 60, "\(attackers) attacker connects answered") { attack.attempts >= attackers }

        let before = try ThreadTimes(pid: victim.pid)
        let startAttempts = attack.attempts
        try await Task.sleep(for: window)
        let busiest = try ThreadTimes(pid: victim.pid).busiestShare(since: before)
        let reconnects = attack.attempts - startAttempts

        var times: [Double] = []
        for (session, data) in zip(sessions, victim.data) {
            let seconds = try await Clock.seconds {
                try session.connect(to: victim.peer, nearbyConnectionData: data)
                try await waitFor(seconds: 30, "a real peer connecting under the flood") { session.connectedPeers == [victim.peer] }
            }
            times.append(seconds)
            await session.disconnectAndWait()
        }
        return Outcome(busiest: busiest, connectTimes: times, reconnects: reconnects)
    }

    private static func waitFor(seconds: Int, _ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw FloodFailure(what: what) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    static func hexBytes(_ hex: String) throws -> [UInt8] {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { throw FloodFailure(what: "reading hex \(hex)") }
        return try stride(from: 0, to: digits.count, by: 2).map { index in
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                throw FloodFailure(what: "reading hex \(hex)")
            }
            return byte
        }
    }

    /// The victim process and what it printed.
    final class Victim {
        let process = Process()
        let input = Pipe()
        let output = Pipe()
        let data: [Data]
        let peer: MCPeerID
        let port: Int
        var pid: Int32 { process.processIdentifier }

        init(dialers: [MCPeerID]) throws {
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            let hexes = dialers.map { $0.wireRepresentation.map { String(format: "%02x", $0) }.joined() }
            process.arguments = ["--flood-victim", hexes.joined(separator: ",")]
            process.standardOutput = output
            process.standardInput = input
            try process.run()
            var text = ""
            while !text.contains("PEER ") || !text.hasSuffix("\n") {
                let chunk = output.fileHandleForReading.availableData
                guard !chunk.isEmpty else { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            let lines = text.split(separator: "\n").map { $0.split(separator: " ") }
            data = try lines.filter { $0.first == "DATA" && $0.count == 2 }.map { Data(try Flood.hexBytes(String($0[1]))) }
            guard data.count == dialers.count, let peerLine = lines.first(where: { $0.first == "PEER" && $0.count == 2 }) else {
                kill(process.processIdentifier, SIGKILL)
                throw FloodFailure(what: "the flood victim's connection data")
            }
            peer = try MCPeerID(wireRepresentation: Data(try Flood.hexBytes(String(peerLine[1]))))
            port = Int(try ConnectionData.decode(ByteBuffer(bytes: data[0])).endpoints[0].port)
        }

        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
    }
}

struct FloodFailure: Error, CustomStringConvertible {
    let what: String
    var description: String { "flood: \(what) failed or did not finish in time" }
}
