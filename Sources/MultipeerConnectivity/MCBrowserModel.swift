import Foundation
import MultipeerDiscovery
import MultipeerWire
import Synchronization
import MultipeerProtocol

/// Apple's `MCBrowserViewControllerDelegate`, with its method names, for the browser model.
public protocol MCBrowserModelDelegate: AnyObject {
    /// `done()` was called while it was available.
    func browserViewControllerDidFinish(_ browserViewController: MCBrowserModel)
    func browserViewControllerWasCancelled(_ browserViewController: MCBrowserModel)
    /// Optional: whether a found peer is listed; every peer is when not implemented. Asked from
    /// the task that follows the browser.
    func browserViewController(
        _ browserViewController: MCBrowserModel, shouldPresentNearbyPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) -> Bool
}

extension MCBrowserModelDelegate {
    public func browserViewController(
        _ browserViewController: MCBrowserModel, shouldPresentNearbyPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) -> Bool { true }
}

/// Apple's names, so that ported delegate conformances and stored properties compile unchanged;
/// presenting it is the app's own UI (there is no UIKit).
public typealias MCBrowserViewController = MCBrowserModel
public typealias MCBrowserViewControllerDelegate = MCBrowserModelDelegate

/// What Apple's `MCBrowserViewController` does, without its view: a list of nearby peers with
/// their state, invitations into `session` from it, and Done / Cancel whose availability follows
/// Apple's rules. A UI reads `snapshot` or iterates `snapshots()`, and calls `invite(_:)`,
/// `done()` and `cancel()`.
///
/// Apple's rules: Done needs connected peers plus the local one to reach
/// `minimumNumberOfPeers`; invitations stop once connected peers, peers connecting and
/// invitations out, plus the local one, reach `maximumNumberOfPeers`; Cancel is always available.
/// The model follows the browser and the session through their `events()`, so both delegates
/// stay the app's. Its subscription to the session only watches: it does not make a session
/// without a delegate accept incoming streams and resources.
open class MCBrowserModel: @unchecked Sendable {
    // @unchecked: the list, the subscribers and the delegate are behind locks.

    /// Optional as Apple's property is; never nil here.
    public var browser: MCNearbyServiceBrowser? { nearbyBrowser }
    private let nearbyBrowser: MCNearbyServiceBrowser
    public let session: MCSession

    /// What the model does to the world, replaced by tests.
    struct Actions: Sendable {
        var invite: @Sendable (_ peer: MCPeerID, _ context: Data?, _ timeout: TimeInterval) async throws -> Void
        var startBrowsing: @Sendable () async throws(MCError) -> Void
        /// Submits a stop in order with the browser's other starts and stops, without waiting.
        var stopBrowsing: @Sendable () -> Void
    }

    private struct State {
        var list = BrowserPeerList()
        var last: Snapshot
        var streams: [UUID: AsyncStream<Snapshot>.Continuation] = [:]
    }

    private let actions: Actions
    private let state: Mutex<State>
    private let following = Mutex<[Task<Void, Never>]>([])
    private let delegateLock = NSLock()
    private weak var storedDelegate: (any MCBrowserModelDelegate)?

    open weak var delegate: (any MCBrowserModelDelegate)? {
        get { delegateLock.withLock { storedDelegate } }
        set { delegateLock.withLock { storedDelegate = newValue } }
    }

    /// Apple's initialiser: an invalid service type stops the program, as Apple's raises.
    public convenience init(serviceType: String, session: MCSession) {
        self.init(browser: MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: serviceType), session: session)
    }

    /// Browses with `configuration`; throws `invalidParameter` for an invalid service type.
    public convenience init(serviceType: String, session: MCSession, configuration: DiscoveryConfiguration) throws(MCError) {
        self.init(browser: try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: serviceType, configuration: configuration), session: session)
    }

    /// Apple's initialiser, the designated one (a subclass overrides it and keeps the others):
    /// the model starts and stops `browser`, so it must not be browsing yet, and must browse as
    /// the session's peer.
    public init(browser: MCNearbyServiceBrowser, session: MCSession) {
        precondition(browser.myPeerID == session.myPeerID, "MCBrowserModel: the browser and the session belong to different peers")
        nearbyBrowser = browser
        self.session = session
        let replaced = InitializerSettings.take(Actions.self, for: browser)
        actions =
            replaced
            ?? Actions(
                invite: { peer, context, timeout in try await browser.invite(peer, to: session, context: context, timeout: timeout) },
                startBrowsing: { () async throws(MCError) in try await browser.start() },
                stopBrowsing: { browser.stopBrowsingForPeers() })
        let list = BrowserPeerList()
        state = Mutex(State(list: list, last: list.snapshot))
        if replaced == nil { follow() }
    }

    /// The model alone: nothing reaches it but what `receive` is given (for tests).
    convenience init(browser: MCNearbyServiceBrowser, session: MCSession, actions: Actions) {
        let settingsTicket = InitializerSettings.leave(actions, for: browser)
        self.init(browser: browser, session: session)
        InitializerSettings.discard(settingsTicket)
    }

    /// Feeds the browser's and the session's events into the list, for the model's lifetime.
    private func follow() {
        let found = nearbyBrowser.events()
        let changes = session.events(takingChannels: false)
        for peer in session.connectedPeers { receive(.sessionChanged(peer, .connected)) }
        let tasks = [
            Task { [weak self] in
                for await event in found {
                    switch event {
                    case .found(let peer, let info, _): self?.receive(.found(peer, discoveryInfo: info.isEmpty ? nil : info))
                    case .lost(let peer): self?.receive(.lost(peer))
                    }
                }
            },
            Task { [weak self] in
                for await event in changes {
                    if case .peerStateChanged(let peer, let state) = event { self?.receive(.sessionChanged(peer, state)) }
                }
            },
        ]
        following.withLock { $0 = tasks }
    }

    deinit {
        for task in following.withLock({ $0 }) { task.cancel() }
        for stream in state.withLock({ $0.streams.values }) { stream.finish() }
    }

    // MARK: The list

    /// Apple's default and bounds: 2 to 8, the local peer included. Values outside are clamped;
    /// a minimum above the maximum raises it.
    public var minimumNumberOfPeers: Int {
        get { state.withLock { $0.list.minimumNumberOfPeers } }
        set { update { $0.setMinimum(newValue) } }
    }

    /// Apple's default and bound: 8, the local peer included, 2 at least. A maximum below the
    /// minimum lowers it.
    public var maximumNumberOfPeers: Int {
        get { state.withLock { $0.list.maximumNumberOfPeers } }
        set { update { $0.setMaximum(newValue) } }
    }

    public var snapshot: Snapshot { state.withLock { $0.last } }

    public var peers: [Peer] { snapshot.peers }

    /// The current snapshot at once, then each changed one. A slow reader gets the newest only.
    public func snapshots() -> AsyncStream<Snapshot> {
        let (stream, continuation) = AsyncStream<Snapshot>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.streams.removeValue(forKey: id) } }
        state.withLock { state in
            state.streams[id] = continuation
            continuation.yield(state.last)
        }
        return stream
    }

    /// Applies one input. Found peers are offered to the delegate first: one it declines to show
    /// is treated as lost (still listed while it is in the session).
    func receive(_ input: Input) {
        if case .found(let peer, let info) = input,
            let delegate, !delegate.browserViewController(self, shouldPresentNearbyPeer: peer, withDiscoveryInfo: info)
        {
            return update { $0.apply(.lost(peer)) }
        }
        update { $0.apply(input) }
    }

    /// Changes the list and publishes the snapshot when it changed, under the lock so that
    /// subscribers see snapshots in the order the changes were made.
    @discardableResult
    private func update<R>(_ body: (inout BrowserPeerList) -> R) -> R {
        state.withLock { state in
            let result = body(&state.list)
            let snapshot = state.list.snapshot
            if snapshot != state.last {
                state.last = snapshot
                for stream in state.streams.values { stream.yield(snapshot) }
            }
            return result
        }
    }

    // MARK: What the UI does

    /// Starts browsing (Apple's controller does when it appears); throws `unavailable` when it cannot.
    public func start() async throws(MCError) {
        update { $0.browsing = true }
        do {
            try await actions.startBrowsing()
        } catch {
            receive(.browsingStopped)
            throw error
        }
    }

    /// Stops browsing without telling the delegate; nearby peers leave the list, peers in the
    /// session and invitations out stay.
    public func stop() {
        actions.stopBrowsing()
        receive(.browsingStopped)
    }

    /// Invites a listed peer into `session`, as tapping it in Apple's controller does; the row
    /// then follows the invitation. False, and nothing sent, when the peer cannot be invited now
    /// (see `Peer.canInvite`) or `context` is over 4,096 bytes.
    @discardableResult
    public func invite(_ peerID: MCPeerID, context: Data? = nil, timeout: TimeInterval = 30) -> Bool {
        guard (context?.count ?? 0) <= WireLimits.maxInvitationContext, update({ $0.startInvitation(peerID) }) else { return false }
        let invite = actions.invite
        Task { [weak self] in
            let failure: MCInvitationError?
            do {
                try await invite(peerID, context, timeout)
                failure = nil
            } catch let error as MCInvitationError {
                failure = error
            } catch {
                failure = MCInvitationError(.unreachable, "\(error)")
            }
            self?.receive(.invitationEnded(peerID, failure))
        }
        return true
    }

    /// Apple's Done: when available (`snapshot.canFinish`), stops browsing and tells the delegate
    /// `browserViewControllerDidFinish`; otherwise does nothing and returns false.
    @discardableResult
    public func done() -> Bool {
        guard snapshot.canFinish else { return false }
        stop()
        delegate?.browserViewControllerDidFinish(self)
        return true
    }

    /// Apple's Cancel: stops browsing and tells the delegate `browserViewControllerWasCancelled`.
    /// The session is left as it is (invitations out run to their end); disconnect it if the app
    /// gives up on it.
    public func cancel() {
        stop()
        delegate?.browserViewControllerWasCancelled(self)
    }
}
