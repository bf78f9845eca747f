@testable import MultipeerConnectivity
import MultipeerSession
import Testing
import MultipeerProtocol

/// What the app is told when a dial met another listener than its connection data named.
@Suite("MCError for a pin or peer mismatch (docs/PROTOCOL.md §9.3)")
struct ConnectionErrorMappingTests {
    @Test func aMismatchIsNotConnectedWithItsOwnReasonNotACancelledTrustDecision() throws {
        let pin = try #require(MCError(connectionError: ConnectionError(.certificateMismatch)))
        #expect(pin.code == .notConnected)
        #expect(pin.reason == "the listener's certificate is not the one its connection data named")
        let peer = try #require(MCError(connectionError: ConnectionError(.unexpectedPeer)))
        #expect(peer.code == .notConnected)
        #expect(peer.reason.hasPrefix("the listener is not the peer that was dialed"))
    }
}
