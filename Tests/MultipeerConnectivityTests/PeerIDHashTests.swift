import MultipeerConnectivity
import MultipeerTestSupport
import Testing

/// Apps elect a host with `myPeerID.hashValue > peerID.hashValue` on every device, so a peer's
/// hash must be the same in every process that holds its ID.
@Suite("MCPeerID hash across processes")
struct PeerIDHashTests {
    /// A peer with identifier 00 01 ... 0f, as another device would send it.
    static let fixedPeerJSON = Data(#"{"identifier":"000102030405060708090a0b0c0d0e0f","displayName":"host"}"#.utf8)
    /// The first 8 bytes of SHA-256(00 01 ... 0f), big-endian, signed, computed with Python's
    /// hashlib: `int.from_bytes(hashlib.sha256(bytes(range(16))).digest()[:8], 'big', signed=True)`.
    static let fixedPeerHash = -4_736_156_068_944_595_266

    @Test func aKnownPeerHasTheDocumentedHash() throws {
        let peer = try JSONDecoder().decode(MCPeerID.self, from: Self.fixedPeerJSON)
        #expect(peer.hash == Self.fixedPeerHash)
        #expect(peer.hashValue == Self.fixedPeerHash)
        // Equal peers, equal hashes, whatever the display name says.
        let renamed = try JSONDecoder().decode(
            MCPeerID.self, from: Data(#"{"identifier":"000102030405060708090a0b0c0d0e0f","displayName":"other"}"#.utf8))
        #expect(renamed == peer && renamed.hash == peer.hash)
    }

    @Test func archivedAndRestoredPeersKeepTheirHash() throws {
        let peer = MCPeerID(displayName: "player")
        let archive = try NSKeyedArchiver.archivedData(withRootObject: peer, requiringSecureCoding: true)
        let restored = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archive))
        #expect(restored.hashValue == peer.hashValue)
        let decoded = try JSONDecoder().decode(MCPeerID.self, from: JSONEncoder().encode(peer))
        #expect(decoded.hashValue == peer.hashValue)
    }

    /// The election an app runs, in this process and in a second one that unarchives the same two
    /// peers: both must reach the same answer, and the hashes must be the documented function's
    /// (computed a third time, by Python).
    @Test func aSecondProcessComputesTheSameHashes() async throws {
        let me = MCPeerID(displayName: "me")
        let other = MCPeerID(displayName: "other")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mpc-hash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let archive = directory.appendingPathComponent("peers.archive")
        try NSKeyedArchiver.archivedData(withRootObject: [me, other] as NSArray, requiringSecureCoding: false).write(to: archive)

        let child = try await runChild(archive: archive, output: directory.appendingPathComponent("hashes.txt"))
        #expect(child == [me.hashValue, other.hashValue])

        let expected = try await pythonHashes(of: [me, other])
        #expect(expected == [me.hash, other.hash])
        let iAmHost = me.hashValue > other.hashValue
        #expect(child.count == 2 && (child[0] > child[1]) == iAmHost)
    }

    /// The other process: this test bundle again, running only `childPrintsHashes`.
    private func runChild(archive: URL, output: URL) async throws -> [Int] {
        let bundle = BuiltProducts.directory.appendingPathComponent("swift-multipeerPackageTests.xctest")
        let run = try await onOwnThread {
            let process = Process()
            process.executableURL = bundle
            process.arguments = ["--testing-library", "swift-testing", "--filter", "childPrintsHashes"]
            process.environment = ProcessInfo.processInfo.environment.merging([
                "MPC_HASH_CHILD_ARCHIVE": archive.path, "MPC_HASH_CHILD_OUTPUT": output.path,
            ]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let watchdog = DispatchWorkItem { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: watchdog)
            process.waitUntilExit()
            watchdog.cancel()
            return process.terminationStatus
        }
        #expect(run == 0)
        let text = try String(contentsOf: output, encoding: .utf8)
        return text.split(separator: "\n").compactMap { Int($0) }
    }

    private func pythonHashes(of peers: [MCPeerID]) async throws -> [Int] {
        let identifiers = try peers.map { peer in
            let json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(peer)) as? [String: Any]
            return try #require(json?["identifier"] as? String)
        }
        let script = """
            import hashlib, sys
            for hex in sys.argv[1:]:
                print(int.from_bytes(hashlib.sha256(bytes.fromhex(hex)).digest()[:8], 'big', signed=True))
            """
        let (status, output) = try await BuiltProducts.run(
            URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", script] + identifiers, seconds: 60)
        #expect(status == 0, "\(output)")
        return output.split(separator: "\n").compactMap { Int($0) }
    }

    /// Runs only in the child process that `aSecondProcessComputesTheSameHashes` starts.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["MPC_HASH_CHILD_ARCHIVE"] != nil))
    func childPrintsHashes() throws {
        let environment = ProcessInfo.processInfo.environment
        let archive = try Data(contentsOf: URL(fileURLWithPath: try #require(environment["MPC_HASH_CHILD_ARCHIVE"])))
        let unarchiver = try NSKeyedUnarchiver(forReadingFrom: archive)
        unarchiver.requiresSecureCoding = false
        let peers = try #require(unarchiver.decodeObject(forKey: NSKeyedArchiveRootObjectKey) as? [MCPeerID])
        let text = peers.map { "\($0.hashValue)\n" }.joined()
        try text.write(toFile: try #require(environment["MPC_HASH_CHILD_OUTPUT"]), atomically: true, encoding: .utf8)
    }
}
