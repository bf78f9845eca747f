import Foundation
import MultipeerConnectivity
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

/// What the async API says of a lost link (docs/PROTOCOL.md §7.9): `linkInterrupted`, then
/// `linkRestored`, and never `notConnected`; Apple's delegate hears nothing of it. The link is
/// reset from outside with `ss -K`, as a router dropping it would.
@Suite("Link recovery events", .serialized, .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/ss")))
struct LinkRecoveryEventTests {
    final class Delegate: NSObject, MCSessionDelegate, @unchecked Sendable {
        let states = NSLock()
        var seen: [MCSessionState] = []
        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { states.withLock { seen.append(state) } }
        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
        func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {}
    }

    @Test func aResetLinkIsInterruptedThenRestoredAndNeverNotConnected() async throws {
        let alice = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let bob = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let delegate = Delegate()
        bob.delegate = delegate
        let aliceEvents = alice.events()
        let data = try await bob.nearbyConnectionData(forPeer: alice.myPeerID)
        let port = try ConnectionData.decode(ByteBuffer(bytes: data)).endpoints[0].port
        try alice.connect(to: bob.myPeerID, nearbyConnectionData: data)
        #expect(try await eventually { alice.connectedPeers == [bob.myPeerID] && bob.connectedPeers == [alice.myPeerID] })

        let reset = try BuiltProducts.runBlocking(
            URL(fileURLWithPath: "/usr/bin/ss"), ["-K", "-t", "state", "established", "( sport = :\(port) or dport = :\(port) )"], seconds: 10)
        try #require(reset.status == 0 && reset.output.contains("127.0.0.1"), "\(reset.output)")
        try await firstMatch(in: aliceEvents, seconds: 10) { event -> Void? in
            if case .linkInterrupted(bob.myPeerID) = event { return () }
            if case .peerStateChanged(bob.myPeerID, .notConnected) = event { Issue.record("alice was told bob is notConnected") }
            return nil
        }
        try await firstMatch(in: aliceEvents, seconds: 10) { event -> Void? in
            if case .linkRestored(bob.myPeerID) = event { return () }
            if case .peerStateChanged(bob.myPeerID, .notConnected) = event { Issue.record("alice was told bob is notConnected") }
            return nil
        }
        try await alice.send(Data("still here".utf8), to: [bob.myPeerID])
        #expect(alice.connectedPeers == [bob.myPeerID] && bob.connectedPeers == [alice.myPeerID])
        // Apple's delegate saw connecting and connected, and nothing of the gap.
        #expect(try await eventually { delegate.states.withLock { delegate.seen } == [.connecting, .connected] })
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }
}
