import Foundation
import MultipeerConnectivity
import MultipeerTestSupport

/// A `multipeer-demo` test mode in a child process: a session serving connection data made for us.
/// @unchecked: every property is set once in init; Process and Pipe are used from one task at a time.
final class ChildPeer: @unchecked Sendable {
    let process = Process()
    let data: Data
    let peer: MCPeerID
    let input = Pipe()
    let output = Pipe()

    init(_ mode: String, for dialer: MCPeerID, environment: [String: String] = [:], _ arguments: String...) throws {
        process.executableURL = try BuiltProducts.executable("multipeer-demo")
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.arguments = [mode, dialer.wireRepresentation.map { String(format: "%02x", $0) }.joined()] + arguments
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        var lines: [String: String] = [:]
        var buffered = Data()
        while lines["DATA"] == nil || lines["PEER"] == nil {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            buffered += chunk
            for line in String(decoding: buffered, as: UTF8.self).split(separator: "\n") {
                let parts = line.split(separator: " ")
                if parts.count == 2 { lines[String(parts[0])] = String(parts[1]) }
            }
        }
        guard let data = lines["DATA"].flatMap(Self.bytes), let peer = lines["PEER"].flatMap(Self.bytes) else {
            kill(process.processIdentifier, SIGKILL)
            throw MCError(.unavailable, reason: "the child peer printed no connection data")
        }
        self.data = Data(data)
        self.peer = try MCPeerID(wireRepresentation: Data(peer))
    }

    /// SIGKILL: a child of the test process inherits its blocked signals, SIGTERM among them.
    func stop() { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    /// Freezes the child (SIGSTOP): it reads nothing more until it is killed.
    func pause() { if process.isRunning { kill(process.processIdentifier, SIGSTOP) } }

    /// Resident memory of the child in KiB, from /proc.
    var residentKiB: Int? {
        guard let handle = FileHandle(forReadingAtPath: "/proc/\(process.processIdentifier)/status"),
            let bytes = try? handle.readToEnd()
        else { return nil }
        let line = String(decoding: bytes, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
        return line?.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    /// The next line the child prints, read on a thread of its own so no task blocks.
    func nextLine() async -> String? {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: self.readLine()) }
        }
    }

    /// The next line the child prints, or nil at its end.
    func readLine() -> String? {
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            guard let first = byte.first else { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if first == 0x0A { return String(decoding: line, as: UTF8.self) }
            line.append(first)
        }
    }

    static func bytes(_ hex: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) ?? hex.endIndex
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}
