import Foundation
import MultipeerDiscovery
import MultipeerTestSupport
import Synchronization
import Testing
@testable import MultipeerConnectivity
import MultipeerProtocol

/// The browser model's state machine, fed by hand: no sockets, no discovery. Invitations go to a
/// scripted inviter that answers when the test says.
@Suite("Browser model: the list, invitations, Done and Cancel")
struct BrowserModelTests {
    /// Invitations the model sends; each waits until the test answers it (or was answered first).
    final class ScriptedInviter: Sendable {
        private enum Slot {
            case waiting(CheckedContinuation<Void, any Error>)
            case answered((any Error)?)
        }

        private let slots = Mutex<[MCPeerID: Slot]>([:])
        let sent = Mutex<[(MCPeerID, Data?)]>([])
        /// Stops the model asked of its browser.
        let stops = Atomic<Int>(0)

        func invite(_ peer: MCPeerID, context: Data?) async throws {
            sent.withLock { $0.append((peer, context)) }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let early = slots.withLock { slots -> (any Error)?? in
                    if case .answered(let error) = slots.removeValue(forKey: peer) { return .some(error) }
                    slots[peer] = .waiting(continuation)
                    return .none
                }
                if let early { if let error = early { continuation.resume(throwing: error) } else { continuation.resume() } }
            }
        }

        /// Ends the invitation to `peer`: connected when `error` is nil.
        func answer(_ peer: MCPeerID, _ error: (any Error)? = nil) {
            let waiting = slots.withLock { slots -> CheckedContinuation<Void, any Error>? in
                if case .waiting(let continuation) = slots.removeValue(forKey: peer) { return continuation }
                slots[peer] = .answered(error)
                return nil
            }
            guard let waiting else { return }
            if let error { waiting.resume(throwing: error) } else { waiting.resume() }
        }
    }

    final class Recorder: MCBrowserModelDelegate, Sendable {
        let calls = Mutex<[String]>([])
        let hidden: Set<String>

        init(hiding hidden: Set<String> = []) { self.hidden = hidden }

        func browserViewControllerDidFinish(_ browserViewController: MCBrowserModel) { calls.withLock { $0.append("finished") } }
        func browserViewControllerWasCancelled(_ browserViewController: MCBrowserModel) { calls.withLock { $0.append("cancelled") } }
        func browserViewController(_ browserViewController: MCBrowserModel, shouldPresentNearbyPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) -> Bool {
            !hidden.contains(peerID.displayName)
        }
    }

    let inviter = ScriptedInviter()
    let model: MCBrowserModel
    let a = MCPeerID(displayName: "a")
    let b = MCPeerID(displayName: "b")
    let c = MCPeerID(displayName: "c")

    init() throws {
        let session = MCSession(peer: MCPeerID(displayName: "me"))
        let browser = try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: "mpc-model", configuration: DiscoveryConfiguration())
        let inviter = inviter
        model = MCBrowserModel(
            browser: browser, session: session,
            actions: .init(
                invite: { peer, context, _ in try await inviter.invite(peer, context: context) },
                startBrowsing: {}, stopBrowsing: { inviter.stops.add(1, ordering: .relaxed) }))
    }

    private func row(_ peer: MCPeerID, in snapshot: MCBrowserModel.Snapshot? = nil) -> MCBrowserModel.Peer? {
        (snapshot ?? model.snapshot).peers.first { $0.peerID == peer }
    }

    /// Waits (at most 5 s) for the invitation task to report back: the row of `peer` in `state`.
    private func settle(_ peer: MCPeerID, _ state: MCBrowserModel.PeerState) async throws {
        _ = try await firstMatch(in: model.snapshots(), seconds: 5) { snapshot in
            snapshot.peers.first { $0.peerID == peer }?.state == state ? true : nil
        }
    }

    private func found(_ peers: MCPeerID...) async throws {
        try await model.start()
        for peer in peers { model.receive(.found(peer, discoveryInfo: ["name": peer.displayName])) }
    }

    @Test func foundPeersAreListedInOrderAndLostOnesLeave() async throws {
        try await found(a, b)
        #expect(model.peers.map(\.peerID) == [a, b])
        #expect(model.peers.allSatisfy { $0.state == .found && $0.isNearby && $0.canInvite })
        #expect(row(a)?.discoveryInfo == ["name": "a"])
        model.receive(.lost(a))
        #expect(model.peers.map(\.peerID) == [b])
    }

    @Test func nothingIsListedBeforeStartOrAfterStop() async throws {
        model.receive(.found(a, discoveryInfo: nil))
        #expect(model.peers.isEmpty)
        try await found(b)
        model.stop()
        #expect(inviter.stops.load(ordering: .relaxed) == 1 && model.peers.isEmpty)
        // A found event still in flight when browsing stopped is stale.
        model.receive(.found(c, discoveryInfo: nil))
        #expect(model.peers.isEmpty)
    }

    @Test func theDelegateChoosesWhichFoundPeersAreShown() async throws {
        let recorder = Recorder(hiding: ["b"])
        model.delegate = recorder
        try await found(a, b)
        #expect(model.peers.map(\.peerID) == [a])
        // Hidden, but in the session: listed, and counted.
        model.receive(.sessionChanged(b, .connected))
        model.receive(.found(b, discoveryInfo: nil))
        #expect(model.peers.map(\.peerID) == [a, b] && row(b)?.isNearby == false && row(b)?.state == .connected)
    }

    @Test func anAcceptedInvitationGoesFromInvitedToConnected() async throws {
        try await found(a)
        #expect(model.invite(a, context: Data("hi".utf8)))
        #expect(row(a)?.state == .invited && row(a)?.canInvite == false)
        #expect(model.invite(a) == false)
        // The session reports an invited peer connecting at once: still our invitation.
        model.receive(.sessionChanged(a, .connecting))
        #expect(row(a)?.state == .invited)
        model.receive(.sessionChanged(a, .connected))
        #expect(row(a)?.state == .connected && model.snapshot.connectedCount == 1)
        inviter.answer(a)
        model.receive(.sessionChanged(a, .notConnected))
        #expect(row(a)?.state == .found && row(a)?.canInvite == true)
    }

    @Test func anInviterThatReturnsFirstShowsConnectedUntilTheSessionCatchesUp() async throws {
        try await found(a)
        #expect(model.invite(a, context: Data("hi".utf8)))
        inviter.answer(a)
        try await settle(a, .connected)
        #expect(inviter.sent.withLock { $0.map(\.1) } == [Data("hi".utf8)])
        #expect(model.snapshot.connectedCount == 1 && model.snapshot.canFinish)
        // The session's own events, late: no flicker back to connecting.
        model.receive(.sessionChanged(a, .connecting))
        #expect(row(a)?.state == .connected)
        model.receive(.sessionChanged(a, .connected))
        model.receive(.sessionChanged(a, .notConnected))
        #expect(row(a)?.state == .found && model.snapshot.connectedCount == 0)
    }

    @Test func aDeclinedInvitationIsShownAndCanBeRetried() async throws {
        try await found(a)
        #expect(model.invite(a))
        model.receive(.sessionChanged(a, .connecting))
        // The session ends a failed invitation with notConnected before the inviter throws.
        model.receive(.sessionChanged(a, .notConnected))
        #expect(row(a)?.state == .invited)
        inviter.answer(a, MCInvitationError(.declined))
        try await settle(a, .declined)
        #expect(row(a)?.canInvite == true)
        #expect(model.invite(a) && row(a)?.state == .invited)
        // A declined peer that goes away leaves the list.
        inviter.answer(a, MCInvitationError(.declined))
        try await settle(a, .declined)
        model.receive(.lost(a))
        #expect(model.peers.isEmpty)
    }

    @Test func otherFailuresKeepTheirReason() async throws {
        try await found(a, b)
        #expect(model.invite(a) && model.invite(b))
        inviter.answer(a, MCInvitationError(.timedOut))
        inviter.answer(b, MCError(.unavailable))
        try await settle(a, .failed(.timedOut))
        try await settle(b, .failed(.unreachable))
    }

    @Test func invitationsStopAtTheMaximum() async throws {
        model.maximumNumberOfPeers = 3
        try await found(a, b, c)
        #expect(model.invite(a) && model.invite(b))
        #expect(row(c)?.canInvite == false)
        #expect(model.invite(c) == false)
        inviter.answer(a, MCInvitationError(.declined))
        try await settle(a, .declined)
        #expect(inviter.sent.withLock { $0.contains { $0.0 == c } } == false)
        #expect(row(c)?.canInvite == true && model.invite(c))
        // Peers connecting by other means take places too.
        model.maximumNumberOfPeers = 4
        model.receive(.sessionChanged(a, .connecting))
        #expect(row(a)?.state == .connecting && row(a)?.canInvite == false)
    }

    @Test func anOversizedContextSendsNothing() async throws {
        try await found(a)
        #expect(model.invite(a, context: Data(count: 4_097)) == false)
        #expect(row(a)?.state == .found && inviter.sent.withLock { $0.isEmpty })
    }

    @Test func doneWaitsForTheMinimumThenStopsBrowsingAndTellsTheDelegate() async throws {
        let recorder = Recorder()
        model.delegate = recorder
        model.minimumNumberOfPeers = 3
        try await found(a, b, c)
        model.receive(.sessionChanged(a, .connected))
        #expect(model.snapshot.canFinish == false)
        #expect(model.done() == false)
        #expect(recorder.calls.withLock { $0 }.isEmpty && inviter.stops.load(ordering: .relaxed) == 0)
        model.receive(.sessionChanged(b, .connected))
        #expect(model.snapshot.canFinish)
        #expect(model.done())
        #expect(recorder.calls.withLock { $0 } == ["finished"] && inviter.stops.load(ordering: .relaxed) == 1)
        // Connected peers stay listed, no longer nearby; the others leave.
        #expect(model.peers.map(\.peerID) == [a, b] && model.peers.allSatisfy { !$0.isNearby && $0.state == .connected })
    }

    @Test func cancelIsAlwaysAvailable() async throws {
        let recorder = Recorder()
        model.delegate = recorder
        try await found(a)
        model.cancel()
        #expect(recorder.calls.withLock { $0 } == ["cancelled"] && inviter.stops.load(ordering: .relaxed) == 1 && model.peers.isEmpty)
    }

    @Test func theCountsHaveApplesDefaultsAndBounds() {
        #expect(model.minimumNumberOfPeers == kMCSessionMinimumNumberOfPeers && model.minimumNumberOfPeers == 2)
        #expect(model.maximumNumberOfPeers == kMCSessionMaximumNumberOfPeers && model.maximumNumberOfPeers == 8)
        model.minimumNumberOfPeers = 0
        model.maximumNumberOfPeers = 20
        #expect(model.minimumNumberOfPeers == 2 && model.maximumNumberOfPeers == 8)
        model.minimumNumberOfPeers = 5
        model.maximumNumberOfPeers = 3
        #expect(model.minimumNumberOfPeers == 3 && model.maximumNumberOfPeers == 3)
        model.minimumNumberOfPeers = 6
        #expect(model.minimumNumberOfPeers == 6 && model.maximumNumberOfPeers == 6)
        // Done needs the local peer plus minimum − 1 connected.
        #expect(model.snapshot.canFinish == false)
    }

    @Test func aConnectedPeerThatStopsAdvertisingStaysListedUntilItLeaves() async throws {
        try await found(a)
        model.receive(.sessionChanged(a, .connected))
        model.receive(.lost(a))
        #expect(row(a)?.state == .connected && row(a)?.isNearby == false && row(a)?.canInvite == false)
        model.receive(.sessionChanged(a, .notConnected))
        #expect(model.peers.isEmpty)
    }

    @Test func snapshotsStartWithTheCurrentListAndFollowEachChangeInOrder() async throws {
        try await found(a)
        let snapshots = model.snapshots()
        let first = try await firstMatch(in: snapshots, seconds: 5) { $0 }
        #expect(first.peers.map(\.peerID) == [a])
        model.receive(.found(b, discoveryInfo: nil))
        model.receive(.lost(a))
        // Newest kept for a slow reader: the last change, never an older one after it.
        let next = try await firstMatch(in: snapshots, seconds: 5) { $0 }
        #expect(next.peers.map(\.peerID) == [b])
    }
}
