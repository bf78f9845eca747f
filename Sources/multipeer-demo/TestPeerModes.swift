import Foundation
import MultipeerConnectivity

/// Sessions in a process of their own, for tests that kill them, limit them or measure them.
extension Demo {
    /// A session serving connection data made for `hex`'s peer; prints DATA and PEER lines.
    static func announce(forHex hex: String) async throws -> MCSession {
        guard let bytes = hexBytes(hex) else { fail("PEERID must be hex") }
        let other = try MCPeerID(wireRepresentation: Data(bytes))
        let session = MCSession(peer: MCPeerID(displayName: "child"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let data = try await session.nearbyConnectionData(forPeer: other)
        // Written straight to the descriptor so the test reading the pipe sees it at once.
        let lines = "DATA \(data.map { String(format: "%02x", $0) }.joined())\n"
            + "PEER \(session.myPeerID.wireRepresentation.map { String(format: "%02x", $0) }.joined())\n"
        FileHandle.standardOutput.write(Data(lines.utf8))
        return session
    }

    static func servePeer(forHex hex: String) async throws {
        let session = try await announce(forHex: hex)
        // Takes what peers send: messages are dropped, streams read, files removed once verified.
        let events = session.events()
        let taker = Task {
            for await event in events {
                switch event {
                case .streamReceived(let reader, _):
                    Task { for try await _ in reader {} }
                case .resourceReceived(_, _, .success(let url)):
                    try? FileManager.default.removeItem(at: url)
                default:
                    break
                }
            }
        }
        try await Task.sleep(for: .seconds(60))
        taker.cancel()
        withExtendedLifetime(session) {}
    }

    /// An application that stalls: it subscribes to events but takes none until standard input
    /// has a line, then checks `count` messages made by `StallPattern` and prints the outcome.
    static func serveSink(forHex hex: String, expecting count: Int) async throws {
        let session = try await announce(forHex: hex)
        let events = session.events()
        // A line means go; end of input means the test is gone, so this process goes too.
        if FileHandle.standardInput.availableData.isEmpty { fail("standard input closed") }
        var received = 0
        var intact = true
        for await event in events {
            guard case .dataReceived(let data, _) = event else { continue }
            intact = intact && StallPattern.matches(data, index: received)
            received += 1
            if received == count { break }
        }
        FileHandle.standardOutput.write(Data("RECEIVED \(received) \(intact ? "INTACT" : "CORRUPT")\n".utf8))
        await session.disconnectAndWait()
    }
}

/// Messages a test sends to the sink: an 8-byte index, then one of four fill bytes.
enum StallPattern {
    static let fills: [Data] = (0..<4).map { Data(repeating: UInt8(0x41 + $0), count: 1 << 20) }

    static func matches(_ data: Data, index: Int) -> Bool {
        guard data.count == 1 << 20 else { return false }
        let prefix = withUnsafeBytes(of: UInt64(index).bigEndian) { Data($0) }
        return data.prefix(8) == prefix && data.dropFirst(8) == fills[index % 4].dropFirst(8)
    }
}
