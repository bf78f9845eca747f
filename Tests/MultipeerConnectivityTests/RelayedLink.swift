import Foundation
import MultipeerTestSupport

/// Interop/impairer/impair.py relaying between two namespaces in place of their bridge: every
/// frame between them is delayed, jittered, reordered, duplicated or dropped as asked.
final class RelayedLink: @unchecked Sendable {
    // @unchecked: the Process and Pipe are set up in init, then only stopped once.
    struct Impairment: Sendable, CustomStringConvertible {
        var delayMs = 0.0, jitterMs = 0.0, reorder = 0.0, duplicate = 0.0, loss = 0.0

        var description: String {
            "\(delayMs)±\(jitterMs) ms, \(reorder) % reordered, \(duplicate) % duplicated, \(loss) % lost"
        }
    }

    /// The relay's counts for one direction (`a->b` is from namespace 0 to namespace 1).
    struct Counts: Decodable {
        let received, forwarded, delayed, reordered, duplicated, dropped, overflow: Int
    }

    static let script = repositoryRootURL.appendingPathComponent("Interop/impairer/impair.py").path

    private let process = Process()
    private let input = Pipe()
    private let statsFile: URL

    /// Takes namespaces 0 and 1 of `namespaces` off the hub's bridge and relays between them.
    init(_ namespaces: NetworkNamespaces, _ impairment: Impairment, seconds: Int = 300) throws {
        let hub = namespaces.hub
        for index in 0..<2 {
            try NetworkNamespaces.ip(["netns", "exec", hub, "ip", "link", "set", "h\(index)l0", "nomaster"])
            // Whole frames with real checksums, or the relay would forward what the stack cannot use.
            try NetworkNamespaces.ip(["netns", "exec", namespaces.names[index], "python3", Self.script, "offloads-off", "mp0"])
        }
        try NetworkNamespaces.ip(["netns", "exec", hub, "python3", Self.script, "offloads-off", "h0l0", "h1l0"])
        statsFile = FileManager.default.temporaryDirectory.appendingPathComponent("relay-\(getpid())-\(UInt32.random(in: 0 ... .max)).json")
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = [
            "netns", "exec", hub, "python3", Self.script, "relay", "--a", "h0l0", "--b", "h1l0",
            "--delay-ms", "\(impairment.delayMs)", "--jitter-ms", "\(impairment.jitterMs)", "--reorder", "\(impairment.reorder)",
            "--duplicate", "\(impairment.duplicate)", "--loss", "\(impairment.loss)", "--seconds", "\(seconds)", "--stats", statsFile.path,
        ]
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        try process.run()
    }

    /// Stops the relay (it ends when its input closes) and returns its counts by direction.
    func stop() async throws -> [String: Counts] {
        try? input.fileHandleForWriting.close()
        let process = process
        let ended = try await onOwnThread { () -> Bool in
            let deadline = Date(timeIntervalSinceNow: 10)
            while process.isRunning && Date() < deadline { usleep(10_000) }
            return !process.isRunning
        }
        if !ended { kill(process.processIdentifier, SIGKILL) }
        defer { try? FileManager.default.removeItem(at: statsFile) }
        return try JSONDecoder().decode([String: Counts].self, from: Data(contentsOf: statsFile))
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
