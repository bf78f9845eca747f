import Foundation
import MultipeerConnectivity
import MultipeerWire
import MultipeerTestSupport
import NIOCore
import NIOPosix
import Testing

@Suite("Session lifetime", .serialized)
struct SessionLifetimeTests {
    /// Keepalive far beyond the test's deadlines: only a goodbye can explain a prompt notConnected.
    static var slowKeepalive: MCSessionConfiguration {
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.keepaliveInterval = .seconds(60)
        configuration.deadPeerDeadline = .seconds(120)
        return configuration
    }

    @Test func aSessionDroppedWithoutDisconnectSaysGoodbyeAndClosesItsSockets() async throws {
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: nil, encryptionPreference: .required, configuration: Self.slowKeepalive)
        let bobDelegate = RecordingDelegate()
        bob.delegate = bobDelegate
        var alice: MCSession? = try MCSession(
            peer: MCPeerID(displayName: "alice"), identity: nil, encryptionPreference: .required, configuration: Self.slowKeepalive)
        weak let weakAlice = alice
        let alicePeer = alice!.myPeerID
        // Bob dials Alice's listener, whose port the connection data names.
        let data = try await alice!.nearbyConnectionData(forPeer: bob.myPeerID)
        let port = Int(try ConnectionData.decode(ByteBuffer(bytes: data)).endpoints[0].port)
        bob.connectPeer(alicePeer, withNearbyConnectionData: data)
        #expect(try await eventually { bob.connectedPeers == [alicePeer] && alice?.connectedPeers.count == 1 })

        alice = nil
        #expect(try await eventually { weakAlice == nil })
        #expect(try await eventually { bob.connectedPeers.isEmpty && bobDelegate.states(of: alicePeer).last == .notConnected })
        var listenerClosed = false
        for _ in 0..<100 where !listenerClosed {
            listenerClosed = !(await Self.accepts(port: port))
            if !listenerClosed { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(listenerClosed)
        await bob.disconnectAndWait()
    }

    static func accepts(port: Int) async -> Bool {
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }

    /// An app's "never" for its timeouts trapped: Duration to TimeAmount, and trust plus handshake.
    @Test func timeoutsOfCenturiesDoNotTrap() async throws {
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.handshakeTimeout = .seconds(Int64.max)
        configuration.certificateDecisionTimeout = .seconds(Int64.max)
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: nil, configuration: configuration)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: nil, configuration: configuration)
        bob.connectPeer(alice.myPeerID, withNearbyConnectionData: try await alice.nearbyConnectionData(forPeer: bob.myPeerID))
        #expect(try await eventually { alice.connectedPeers == [bob.myPeerID] && bob.connectedPeers == [alice.myPeerID] })
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }
}
