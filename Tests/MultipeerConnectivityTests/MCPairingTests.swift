import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import Synchronization
import Testing

/// The pairing code through the public API: both apps see the same digits before they decide.
@Suite("MCSession pairing code")
struct MCPairingTests {
    @Test(arguments: [MCEncryptionPreference.required, .none])
    func bothSessionsShowTheSameCodeBeforeDeciding(preference: MCEncryptionPreference) async throws {
        let alice = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: nil, encryptionPreference: preference, configuration: .loopbackOnly)
        let bob = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: nil, encryptionPreference: preference, configuration: .loopbackOnly)
        let seen = Mutex<[String: String]>([:])
        for (session, name) in [(alice, "alice"), (bob, "bob")] {
            session.setTrustEvaluator { request in
                // Also readable through the session while the question is open.
                seen.withLock { $0[name] = request.pairingCode }
                return request.pairingCode == session.pairingCode(with: request.peer)
            }
        }
        bob.connectPeer(alice.myPeerID, withNearbyConnectionData: try await alice.nearbyConnectionData(forPeer: bob.myPeerID))
        #expect(try await eventually { alice.connectedPeers.count == 1 && bob.connectedPeers.count == 1 })
        let codes = seen.withLock { $0 }
        #expect(codes.count == 2 && codes["alice"] == codes["bob"])
        #expect(alice.pairingCode(with: bob.myPeerID) == codes["alice"])
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }
}
