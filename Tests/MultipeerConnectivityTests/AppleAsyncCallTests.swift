import MultipeerConnectivity
import MultipeerTestSupport
import Testing

// Apple's synchronous calls, made from async code without `await`, as apps make them in
// `.task {}` and async functions. Before, an async overload of the same name won there and
// `session.disconnect()` failed with "expression is 'async' but is not marked with 'await'".

/// Compiled, never run (it would advertise and browse on the real network): every Apple call
/// whose name has an async relative in this library, from async code, without `await`.
private func appleStyleCallsFromAsyncCode(
    session: MCSession, advertiser: MCNearbyServiceAdvertiser, browser: MCNearbyServiceBrowser,
    assistant: MCAdvertiserAssistant, model: MCBrowserViewController, peer: MCPeerID, file: URL
) async throws {
    advertiser.startAdvertisingPeer()
    advertiser.stopAdvertisingPeer()
    browser.startBrowsingForPeers()
    browser.invitePeer(peer, to: session, withContext: nil, timeout: 30)
    browser.stopBrowsingForPeers()
    assistant.start()
    assistant.stop()
    model.stop()
    session.nearbyConnectionData(forPeer: peer) { _, _ in }
    session.connectPeer(peer, withNearbyConnectionData: Data())
    try session.send(Data(), toPeers: [peer], with: .reliable)
    _ = session.sendResource(at: file, withName: "file", toPeer: peer, withCompletionHandler: nil)
    _ = try session.startStream(withName: "stream", toPeer: peer)
    session.cancelConnectPeer(peer)
    session.disconnect()
    // Apple's generated async form.
    _ = try await session.nearbyConnectionData(forPeer: peer)
}

/// Apple's delegate, reporting state changes to a stream.
private final class StateWatcher: NSObject, MCSessionDelegate, Sendable {
    let changes: AsyncStream<(MCPeerID, MCSessionState)>
    private let continuation: AsyncStream<(MCPeerID, MCSessionState)>.Continuation

    override init() {
        (changes, continuation) = AsyncStream.makeStream()
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        continuation.yield((peerID, state))
    }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {}
}

@Suite("Apple's calls from async code")
struct AppleAsyncCallTests {
    @Test func connectWithAppleAsyncFormThenDisconnectWithoutAwait() async throws {
        let configuration = MCSessionConfiguration.loopbackOnly
        let host = MCSession(peer: MCPeerID(displayName: "host"), securityIdentity: nil, encryptionPreference: .optional, configuration: configuration)
        let guest = MCSession(peer: MCPeerID(displayName: "guest"), securityIdentity: nil, encryptionPreference: .optional, configuration: configuration)
        let hostWatcher = StateWatcher()
        let guestWatcher = StateWatcher()
        host.delegate = hostWatcher
        guest.delegate = guestWatcher

        let data = try await host.nearbyConnectionData(forPeer: guest.myPeerID)
        guest.connectPeer(host.myPeerID, withNearbyConnectionData: data)
        let guestMember = guest.myPeerID
        _ = try await firstMatch(in: hostWatcher.changes, seconds: 20) { peer, state in
            peer == guestMember && state == .connected ? true : nil
        }

        // Apple's plain call, in async code.
        host.disconnect()
        let hostMember = host.myPeerID
        _ = try await firstMatch(in: guestWatcher.changes, seconds: 20) { peer, state in
            peer == hostMember && state == .notConnected ? true : nil
        }
        #expect(host.connectedPeers.isEmpty)
        await guest.disconnectAndWait()
    }
}
