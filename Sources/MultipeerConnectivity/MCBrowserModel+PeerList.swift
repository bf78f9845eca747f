import Foundation
import MultipeerProtocol

extension MCBrowserModel {
    /// Where a listed peer stands, as a browser UI shows it.
    public enum PeerState: Hashable, Sendable {
        /// Nearby and not in the session: it can be invited.
        case found
        /// Our invitation is out: not yet answered, or accepted and still connecting.
        case invited
        /// The session reports it connecting by other means (it invited us, or a member introduced it).
        case connecting
        case connected
        /// It declined our last invitation; it can be invited again.
        case declined
        /// Our last invitation failed for another reason (timed out, unreachable, ...); it can be invited again.
        case failed(MCInvitationError.Reason)
    }

    /// One row of the list.
    public struct Peer: Hashable, Sendable {
        public let peerID: MCPeerID
        /// As advertised; nil for a peer known only through the session.
        public let discoveryInfo: [String: String]?
        public let state: PeerState
        /// Still found by the browser. A connected peer that stops advertising stays listed.
        public let isNearby: Bool
        /// `invite(_:)` would send an invitation now (the maximum counts invitations out).
        public let canInvite: Bool
    }

    /// The whole list and what the UI's buttons may do, at one moment.
    public struct Snapshot: Hashable, Sendable {
        /// In the order they were first seen.
        public let peers: [Peer]
        public let minimumNumberOfPeers: Int
        public let maximumNumberOfPeers: Int
        /// Remote peers connected (the local one is not counted).
        public let connectedCount: Int
        /// `done()` is available: connected peers plus the local one reach `minimumNumberOfPeers`.
        public let canFinish: Bool
    }

    /// What changes the list: discovery, the session, and the model's own invitations.
    enum Input: Sendable {
        case found(MCPeerID, discoveryInfo: [String: String]?)
        case lost(MCPeerID)
        /// Browsing stopped: the browser forgets found peers without reporting them lost.
        case browsingStopped
        case sessionChanged(MCPeerID, MCSessionState)
        /// An invitation this model sent returned: nil when the peer connected.
        case invitationEnded(MCPeerID, MCInvitationError?)
    }
}

/// The browser model's state machine: no I/O, so every transition can be tested by feeding inputs.
struct BrowserPeerList: Sendable {
    enum Invitation: Hashable, Sendable {
        case none, pending, declined
        case failed(MCInvitationError.Reason)
        /// The inviter returned connected; the session's own event may still be on its way.
        case accepted
    }

    struct Entry: Sendable {
        let peer: MCPeerID
        var discoveryInfo: [String: String]?
        var nearby: Bool
        var session: MCSessionState
        var invitation: Invitation

        var isConnected: Bool { session == .connected || invitation == .accepted }
        /// Connected, connecting or about to be: a place in the session counted against the maximum.
        var takesPlace: Bool { session != .notConnected || invitation == .pending || invitation == .accepted }

        var state: MCBrowserModel.PeerState {
            if isConnected { return .connected }
            if invitation == .pending { return .invited }
            if session == .connecting { return .connecting }
            switch invitation {
            case .declined: return .declined
            case .failed(let reason): return .failed(reason)
            case .none, .pending, .accepted: return .found
            }
        }
    }

    private(set) var entries: [Entry] = []
    /// Found events count only while browsing; one arriving after a stop is stale.
    var browsing = false
    private(set) var minimumNumberOfPeers = kMCSessionMinimumNumberOfPeers
    private(set) var maximumNumberOfPeers = kMCSessionMaximumNumberOfPeers

    /// Clamped to what a session can hold; raises the maximum when it would fall below.
    mutating func setMinimum(_ value: Int) {
        minimumNumberOfPeers = Self.clamped(value)
        maximumNumberOfPeers = max(maximumNumberOfPeers, minimumNumberOfPeers)
    }

    /// Clamped to what a session can hold; lowers the minimum when it would rise above.
    mutating func setMaximum(_ value: Int) {
        maximumNumberOfPeers = Self.clamped(value)
        minimumNumberOfPeers = min(minimumNumberOfPeers, maximumNumberOfPeers)
    }

    private static func clamped(_ value: Int) -> Int {
        min(max(value, kMCSessionMinimumNumberOfPeers), kMCSessionMaximumNumberOfPeers)
    }

    var connectedCount: Int { entries.count(where: \.isConnected) }

    var canFinish: Bool { connectedCount + 1 >= minimumNumberOfPeers }

    /// The local peer, those in place and the invitee must fit within the maximum.
    func canInvite(_ entry: Entry) -> Bool {
        entry.nearby && !entry.takesPlace
            && entries.count(where: \.takesPlace) + 2 <= maximumNumberOfPeers
    }

    /// Marks an invitation to `peer` as out; false when the peer cannot be invited now.
    mutating func startInvitation(_ peer: MCPeerID) -> Bool {
        guard let index = index(peer), canInvite(entries[index]) else { return false }
        entries[index].invitation = .pending
        return true
    }

    mutating func apply(_ input: MCBrowserModel.Input) {
        switch input {
        case .found(let peer, let info):
            guard browsing else { return }
            if let index = index(peer) {
                entries[index].nearby = true
                entries[index].discoveryInfo = info
            } else {
                entries.append(Entry(peer: peer, discoveryInfo: info, nearby: true, session: .notConnected, invitation: .none))
            }
        case .lost(let peer):
            guard let index = index(peer) else { return }
            entries[index].nearby = false
        case .browsingStopped:
            browsing = false
            for index in entries.indices { entries[index].nearby = false }
        case .sessionChanged(let peer, let state):
            guard let index = index(peer) else {
                // A peer in the session that the browser never showed still counts towards done.
                if state != .notConnected {
                    entries.append(Entry(peer: peer, discoveryInfo: nil, nearby: false, session: state, invitation: .none))
                }
                return
            }
            let previous = entries[index].session
            entries[index].session = state
            switch (state, entries[index].invitation) {
            case (.connected, .accepted): entries[index].invitation = .none
            // Left the session: a fresh start; this also ends the report of an acceptance.
            case (.notConnected, _) where previous == .connected: entries[index].invitation = .none
            case (.notConnected, .accepted): entries[index].invitation = .none
            default: break
            }
        case .invitationEnded(let peer, let error):
            guard let index = index(peer), entries[index].invitation == .pending else { return }
            entries[index].invitation = switch error?.reason {
            case nil: entries[index].session == .connected ? .none : .accepted
            case .declined: .declined
            case let reason?: .failed(reason)
            }
        }
        entries.removeAll { !$0.nearby && !$0.takesPlace }
    }

    private func index(_ peer: MCPeerID) -> Int? { entries.firstIndex { $0.peer == peer } }

    var snapshot: MCBrowserModel.Snapshot {
        MCBrowserModel.Snapshot(
            peers: entries.map {
                MCBrowserModel.Peer(peerID: $0.peer, discoveryInfo: $0.discoveryInfo, state: $0.state, isNearby: $0.nearby, canInvite: canInvite($0))
            },
            minimumNumberOfPeers: minimumNumberOfPeers, maximumNumberOfPeers: maximumNumberOfPeers,
            connectedCount: connectedCount, canFinish: canFinish)
    }
}
