import Foundation
import Logging
import MultipeerConnectivity
import MultipeerDiscovery
import Synchronization

/// `multipeer-demo chatter first|second COUNT INTERVAL-MS`: one side of a chat whose link a test
/// breaks (docs/PROTOCOL.md §7.9), run inside a network namespace. Both print `PEER <hex>`; the
/// first reads the second's `PEER` line and prints `DATA <hex>` for it, the second reads that
/// line and connects. Once connected, each prints `CONNECTED` and waits for `GO`, then sends
/// COUNT reliable messages (a 4-byte index), one every INTERVAL-MS, and prints
/// `DONE received=N inorder=yes|no duplicates=D notconnected=K` once it has received COUNT and
/// sent all of its own; it disconnects at `QUIT` or when standard input ends. Meanwhile it prints
/// `INTERRUPTED` and `RESTORED` as the async API reports the link lost and back.
/// With `MULTIPEER_CHATTER_DISCOVERY=SERVICE` it also advertises and browses SERVICE on mp0 (the
/// namespace's link), so its session learns where the other side is when both have moved; its
/// session then has an identity (a throwaway one), without which discovery feeds no redials.
extension Demo {
    static func chatter(first: Bool, count: Int, interval: Int) async throws {
        var configuration = MCSessionConfiguration()
        // MULTIPEER_SOAK_LOG=1: the session's log on standard error, as for `soaker`.
        if ProcessInfo.processInfo.environment["MULTIPEER_SOAK_LOG"] != nil {
            configuration.logger = Logger(label: first ? "first" : "second") { StreamLogHandler.standardError(label: $0) }
            configuration.logger.logLevel = .info
        }
        // MULTIPEER_CHATTER_GRACE=SECONDS: the link recovery grace, for tests on loaded machines.
        if let seconds = ProcessInfo.processInfo.environment["MULTIPEER_CHATTER_GRACE"].flatMap(Int64.init) {
            configuration.linkRecoveryGrace = .seconds(seconds)
        }
        let discoveryService = ProcessInfo.processInfo.environment["MULTIPEER_CHATTER_DISCOVERY"]
        // Discovery feeds only the redials of a member with an identity (they pin its certificate).
        let identity = try discoveryService.map { _ in try DemoAuthority().issue(first ? "first" : "second") }
        let session = try MCSession(
            peer: MCPeerID(displayName: first ? "first" : "second"), identity: identity, encryptionPreference: .required,
            configuration: configuration)
        let events = session.events()
        var discovery: (MCNearbyServiceAdvertiser, MCNearbyServiceBrowser)?
        if let service = discoveryService {
            // The embedded engine: the test's namespaces have no avahi-daemon.
            let discoveryConfiguration = DiscoveryConfiguration(interfaceNames: ["mp0"], engine: .embedded)
            let advertiser = try MCNearbyServiceAdvertiser(
                peer: session.myPeerID, discoveryInfo: nil, serviceType: service, configuration: discoveryConfiguration)
            let browser = try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: service, configuration: discoveryConfiguration)
            try await advertiser.start()
            try await browser.start()
            discovery = (advertiser, browser)
        }
        defer { withExtendedLifetime(discovery) {} }
        func say(_ line: String) { try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8)) }
        func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }
        let input = LineReader()
        say("PEER \(hex(session.myPeerID.wireRepresentation))")
        guard let otherLine = input.next(), otherLine.hasPrefix("PEER "), let otherBytes = hexBytes(String(otherLine.dropFirst(5))) else {
            fail("expected the other side's PEER line")
        }
        let other = try MCPeerID(wireRepresentation: Data(otherBytes))
        if first {
            say("DATA \(hex(try await session.nearbyConnectionData(forPeer: other)))")
        } else {
            guard let dataLine = input.next(), dataLine.hasPrefix("DATA "), let data = hexBytes(String(dataLine.dropFirst(5))) else {
                fail("expected the first side's DATA line")
            }
            try session.connect(to: other, nearbyConnectionData: Data(data))
        }
        var received: [UInt32] = []
        var notConnected = 0
        var iterator = events.makeAsyncIterator()
        while true {
            guard let event = await iterator.next() else { fail("the session's events ended") }
            if case .peerStateChanged(other, .connected) = event { break }
            if case .peerStateChanged(other, .notConnected) = event { fail("could not connect") }
        }
        say("CONNECTED")
        guard input.next() == "GO" else { fail("expected GO") }
        let sender = Task {
            for index in 0..<count {
                let bytes = withUnsafeBytes(of: UInt32(index).bigEndian) { Data($0) }
                // Sent whether or not a link carries the peer now: recovery keeps it.
                do { try session.send(bytes, toPeers: [other], with: .reliable) } catch { say("SENDFAILED \(index) \(error)") }
                try await Task.sleep(for: .milliseconds(interval))
            }
        }
        while received.count < count, let event = await iterator.next() {
            switch event {
            case .dataReceived(let data, _) where data.count == 4:
                received.append(data.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self).bigEndian })
            case .peerStateChanged(other, .notConnected):
                notConnected += 1
                say("NOTCONNECTED")
            case .linkInterrupted(other):
                say("INTERRUPTED")
            case .linkRestored(other):
                say("RESTORED")
            default:
                break
            }
        }
        try await sender.value
        let inOrder = received == (0..<UInt32(count)).map { $0 }
        say("DONE received=\(received.count) inorder=\(inOrder ? "yes" : "no") duplicates=\(received.count - Set(received).count) notconnected=\(notConnected)")
        _ = input.next()
        await session.disconnectAndWait()
    }
}

/// Standard input, a line at a time, from a thread of its own.
final class LineReader: Sendable {
    private let buffered = Mutex(Data())

    func next() -> String? {
        while true {
            let line = buffered.withLock { data -> String? in
                guard let end = data.firstIndex(of: 0x0A) else { return nil }
                let line = String(decoding: data[data.startIndex..<end], as: UTF8.self)
                data.removeSubrange(data.startIndex...end)
                return line
            }
            if let line { return line }
            let chunk = FileHandle.standardInput.availableData
            if chunk.isEmpty { return nil }
            buffered.withLock { $0.append(chunk) }
        }
    }
}
