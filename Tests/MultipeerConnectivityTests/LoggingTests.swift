import Foundation
import Logging
import MultipeerConnectivity
import MultipeerTestSupport
import Synchronization
import Testing

/// Collects what a logger was told, for tests.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }

    func logger(_ label: String) -> Logger {
        var logger = Logger(label: label) { _ in
            EventLogHandler { event in self.append("\(event.level) \(event.message) \(EventLogHandler.fields(of: event))") }
        }
        logger.logLevel = .trace
        return logger
    }

    func append(_ line: String) { lines.withLock { $0.append(line) } }
}


@Suite("Diagnostics through swift-log", .serialized)
struct LoggingTests {
    @Test func refusalsAndEndsAreLoggedWithTheirReasonsAndPayloadsNever() async throws {
        let capture = LogCapture()
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.logger = capture.logger("alice")
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: nil, configuration: configuration)
        let bob = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let data = try await alice.nearbyConnectionData(forPeer: bob.myPeerID)
        bob.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
        // Both sides: each reaches connected on its own time, and bob sends next.
        #expect(try await eventually { alice.connectedPeers == [bob.myPeerID] && bob.connectedPeers == [alice.myPeerID] })
        let marker = "payload-marker-\(UUID().uuidString)"
        let events = alice.events()  // before the send, so the message cannot slip past it
        try bob.send(Data(marker.utf8), toPeers: [alice.myPeerID], with: .reliable)
        _ = try await withDeadline(seconds: 10) {
            for await event in events { if case .dataReceived = event { break } }
        }
        // The same connection data again: single use, so it is refused with its reason.
        let carol = MCSession(peer: bob.myPeerID, securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        carol.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
        #expect(try await eventually { capture.all.contains { $0.contains("refused a connection") && $0.contains("unknownToken") } })
        await bob.disconnectAndWait()
        #expect(try await eventually { capture.all.contains { $0.contains("connection ended") && $0.contains("bob") } })
        #expect(capture.all.contains { $0.contains("connected") && $0.contains("encrypted=true") })
        #expect(!capture.all.contains { $0.contains(marker) })
        await alice.disconnectAndWait()
        await carol.disconnectAndWait()
    }
}
