import MultipeerConnectivity
import Synchronization

/// The browser model's list as the chat shows it: each peer keeps the number it was first
/// listed with, so `/invite 2` means the same peer while it stays listed; a line is printed
/// when a peer appears, changes state or leaves.
final class NearbyList: Sendable {
    private struct State {
        var numbers: [MCPeerID: Int] = [:]
        var next = 1
        var shown: [MCPeerID: MCBrowserModel.PeerState] = [:]
    }

    private let state = Mutex(State())

    /// Numbers new peers and returns a line describing what changed, or nil when nothing did.
    func update(_ snapshot: MCBrowserModel.Snapshot) -> String? {
        state.withLock { state in
            var changes: [String] = []
            for row in snapshot.peers {
                if state.numbers[row.peerID] == nil {
                    state.numbers[row.peerID] = state.next
                    state.next += 1
                }
                guard state.shown[row.peerID] != row.state else { continue }
                state.shown[row.peerID] = row.state
                changes.append("\(state.numbers[row.peerID]!) \(Terminal.safe(row.peerID.displayName)) (\(Self.describe(row.state)))")
            }
            let listed = Set(snapshot.peers.map(\.peerID))
            for gone in state.shown.keys where !listed.contains(gone) {
                state.shown[gone] = nil
                changes.append("\(state.numbers[gone]!) \(Terminal.safe(gone.displayName)) (gone)")
            }
            // Numbers are kept only for listed peers, so peers coming and going on a busy or
            // hostile LAN cannot grow the table; a peer that returns gets a new number.
            for peer in state.numbers.keys where !listed.contains(peer) { state.numbers[peer] = nil }
            return changes.isEmpty ? nil : "nearby: " + changes.joined(separator: ", ")
        }
    }

    /// The whole list.
    func describe(_ snapshot: MCBrowserModel.Snapshot) -> String {
        guard !snapshot.peers.isEmpty else { return "nearby: nobody found yet" }
        return state.withLock { state in
            "nearby: " + snapshot.peers.map { row in
                let number = state.numbers[row.peerID].map(String.init) ?? "?"
                return "\(number) \(Terminal.safe(row.peerID.displayName)) (\(Self.describe(row.state)))"
            }.joined(separator: ", ")
        }
    }

    /// A row by its number, or by display name when exactly one peer has it.
    func find(_ argument: String, in snapshot: MCBrowserModel.Snapshot) -> MCBrowserModel.Peer? {
        if let number = Int(argument) {
            let peer = state.withLock { state in state.numbers.first { $0.value == number }?.key }
            return snapshot.peers.first { $0.peerID == peer }
        }
        let named = snapshot.peers.filter { $0.peerID.displayName == argument }
        return named.count == 1 ? named[0] : nil
    }

    static func describe(_ state: MCBrowserModel.PeerState) -> String {
        switch state {
        case .found: "found"
        case .invited: "invited"
        case .connecting: "connecting"
        case .connected: "connected"
        case .declined: "declined"
        case .failed(let reason): "failed: \(reason)"
        }
    }
}
