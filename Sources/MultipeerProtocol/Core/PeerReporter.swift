import MultipeerWire

/// Turns the session's view of each peer into the app's state changes, each change once:
/// `connecting` then `connected` or `notConnected`, never the same state twice in a row, and
/// never back to `connecting` from `connected`.
package struct PeerReporter {
    private var reported: [Bytes16: (peer: WirePeerID, state: PeerConnectionState)] = [:]

    /// The change to report, or nil when the app already knows.
    mutating func change(_ peer: WirePeerID, to newState: PeerConnectionState) -> PeerConnectionState? {
        let previous = reported[peer.identifier]?.state ?? .notConnected(nil)
        switch (previous, newState) {
        case (.notConnected, .notConnected), (.connecting, .connecting), (.connected, .connected), (.connected, .connecting):
            return nil
        default:
            break
        }
        if case .notConnected = newState {
            reported[peer.identifier] = nil
        } else {
            reported[peer.identifier] = (peer, newState)
        }
        return newState
    }

    /// Every peer the app currently sees as connecting or connected.
    var visiblePeers: [WirePeerID] { reported.values.map(\.peer) }

    mutating func removeAll() { reported.removeAll() }
}
