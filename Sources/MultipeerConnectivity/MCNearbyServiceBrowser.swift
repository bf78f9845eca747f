import Foundation
import NIOCore
import MultipeerDiscovery
import MultipeerWire
import Synchronization
import MultipeerProtocol

/// Apple's browser delegate.
public protocol MCNearbyServiceBrowserDelegate: AnyObject {
    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?)
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID)
    /// Optional, as in Apple's protocol.
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error)
}

extension MCNearbyServiceBrowserDelegate {
    public func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {}
}

/// Finds peers advertising a service type on the LAN (docs/PROTOCOL.md §12.3), as Apple's class
/// does, plus `events()`, an async sequence of found and lost peers with their addresses.
open class MCNearbyServiceBrowser: NSObject, @unchecked Sendable {
    /// A found or lost peer, for the Swift-native API.
    public enum Event: Sendable {
        case found(MCPeerID, discoveryInfo: [String: String], endpoints: [Endpoint])
        case lost(MCPeerID)
    }

    /// Where a found peer listens: an address (as text), its port, and the interface it was seen on.
    public struct Endpoint: Hashable, Sendable {
        public let host: String
        public let port: Int
        public let interfaceIndex: Int
    }

    public let myPeerID: MCPeerID
    public let serviceType: String
    private let type: ServiceType
    private let configuration: DiscoveryConfiguration
    private let delegateLock = NSLock()
    private weak var storedDelegate: (any MCNearbyServiceBrowserDelegate)?
    private let delegateQueue: DispatchQueue
    /// Start and stop, from Apple's calls or the async ones, run in order, one at a time.
    private let sequencer = OperationSequencer()
    private let state = Mutex<(browser: DiscoveryBrowser?, streams: [UUID: AsyncStream<Event>.Continuation], peers: [Bytes16: MCPeerID], endpoints: [Bytes16: [SocketAddress]])>((nil, [:], [:], [:]))

    open weak var delegate: (any MCNearbyServiceBrowserDelegate)? {
        get { delegateLock.withLock { storedDelegate } }
        set { delegateLock.withLock { storedDelegate = newValue } }
    }

    /// Apple's initialiser, the designated one (a subclass overrides it and keeps the others):
    /// an invalid service type stops the program, as Apple's raises.
    public init(peer myPeerID: MCPeerID, serviceType: String) {
        let configuration = InitializerSettings.take(DiscoveryConfiguration.self, for: myPeerID) ?? DiscoveryConfiguration()
        do {
            type = try Self.validated(serviceType)
        } catch {
            preconditionFailure("MCNearbyServiceBrowser: \(error.reason)")
        }
        self.myPeerID = myPeerID
        self.serviceType = serviceType
        self.configuration = configuration
        delegateQueue = DispatchQueue(label: "MCNearbyServiceBrowser.delegate.\(serviceType)")
        super.init()
    }

    /// Throws `invalidParameter` with the reason for a bad service type.
    public convenience init(peer myPeerID: MCPeerID, serviceType: String, configuration: DiscoveryConfiguration) throws(MCError) {
        _ = try Self.validated(serviceType)
        let settingsTicket = InitializerSettings.leave(configuration, for: myPeerID)
        self.init(peer: myPeerID, serviceType: serviceType)
        InitializerSettings.discard(settingsTicket)
    }

    private static func validated(_ serviceType: String) throws(MCError) -> ServiceType {
        do {
            return try ServiceType(serviceType)
        } catch {
            throw MCError(.invalidParameter, reason: error.description)
        }
    }

    /// Found and lost peers from now on, until the browser stops or the stream is dropped.
    public func events() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(1_024))
        let id = UUID()
        state.withLock { $0.streams[id] = continuation }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.streams.removeValue(forKey: id) } }
        return stream
    }

    open func startBrowsingForPeers() {
        sequencer.submit {
            do throws(MCError) {
                try await self.startNow()
            } catch {
                self.delegateQueue.async { self.delegate?.browser(self, didNotStartBrowsingForPeers: error) }
            }
        }
    }

    open func stopBrowsingForPeers() {
        sequencer.submit { await self.stopNow() }
    }

    public func start() async throws(MCError) {
        try await sequencer.runThrowing { () async throws(MCError) in try await self.startNow() }
    }

    private func startNow() async throws(MCError) {
        guard state.withLock({ $0.browser }) == nil else { return }
        let browser = DiscoveryBrowser(localPeer: myPeerID.wire, serviceType: type, configuration: configuration) { [weak self] event in
            self?.handle(event)
        }
        do {
            try await browser.start()
        } catch {
            throw MCError(.unavailable, reason: error.description)
        }
        state.withLock { $0.browser = browser }
    }

    /// Stops browsing; found peers are forgotten without `lostPeer` calls, as Apple's does.
    public func stop() async {
        await sequencer.run { await self.stopNow() }
    }

    private func stopNow() async {
        let browser = state.withLock { state in
            defer {
                state.browser = nil
                state.peers.removeAll()
                state.endpoints.removeAll()
            }
            return state.browser
        }
        await browser?.stop()
    }

    // MARK: Invitations (docs/PROTOCOL.md §7.2)

    /// Apple's: invites a found peer into `session`. The session reports the peer connecting at
    /// once, then connected, or notConnected when the invitation is declined, not answered within
    /// `timeout` seconds (0 or less: 30, Apple's default), the chosen session is full or cannot
    /// agree on encryption. A context over 4,096 bytes stops the program, as Apple's raises.
    open func invitePeer(_ peerID: MCPeerID, to session: MCSession, withContext context: Data?, timeout: TimeInterval) {
        precondition((context?.count ?? 0) <= WireLimits.maxInvitationContext, "MCNearbyServiceBrowser: invitation context over 4,096 bytes")
        Task { try? await self.invite(peerID, to: session, context: context, timeout: timeout) }
    }

    /// Swift-native: invites a found peer and returns once it is connected; throws
    /// `MCInvitationError` with the reason otherwise, or `MCError.invalidParameter` for a context
    /// over 4,096 bytes.
    public func invite(_ peerID: MCPeerID, to session: MCSession, context: Data? = nil, timeout: TimeInterval = 30) async throws {
        guard (context?.count ?? 0) <= WireLimits.maxInvitationContext else {
            throw MCError(.invalidParameter, reason: "invitation context of \(context?.count ?? 0) bytes, at most \(WireLimits.maxInvitationContext)")
        }
        let endpoints = state.withLock { $0.endpoints[peerID.wire.identifier] } ?? []
        guard !endpoints.isEmpty else {
            session.beginInvitation(peerID)
            let error = MCInvitationError(.unreachable, "\(peerID.displayName) is not among the peers this browser found")
            session.endInvitation(peerID, failed: MCError(.notConnected, reason: error.description))
            throw error
        }
        try await session.invite(peerID, at: endpoints, context: context ?? Data(), timeout: timeout)
    }

    /// IPv4 first, then IPv6; link-local IPv6 keeps the interface it was seen on (its scope).
    private static func dialable(_ endpoints: [MDNSBrowserCore.Endpoint]) -> [SocketAddress] {
        let ipv4 = endpoints.filter { if case .ipv4 = $0.address { true } else { false } }
        let ipv6 = endpoints.filter { if case .ipv6 = $0.address { true } else { false } }
        return (ipv4 + ipv6).map { MDNSInterfaces.socketAddress($0.address, port: $0.port, interfaceIndex: $0.interfaceIndex) }
    }

    private func handle(_ event: DiscoveryBrowser.Event) {
        switch event {
        case .found(let found):
            let (peer, streams) = state.withLock { state -> (MCPeerID, [AsyncStream<Event>.Continuation]) in
                let peer = state.peers[found.peer.identifier] ?? MCPeerID(wire: found.peer)
                state.peers[found.peer.identifier] = peer
                state.endpoints[found.peer.identifier] = Self.dialable(found.endpoints)
                return (peer, Array(state.streams.values))
            }
            DiscoveryNews.peerSeen(found.peer.identifier, at: Self.dialable(found.endpoints))
            let endpoints = found.endpoints.map { Endpoint(host: $0.address.description, port: Int($0.port), interfaceIndex: $0.interfaceIndex) }
            for stream in streams { stream.yield(.found(peer, discoveryInfo: found.discoveryInfo, endpoints: endpoints)) }
            let info = found.discoveryInfo
            delegateQueue.async { self.delegate?.browser(self, foundPeer: peer, withDiscoveryInfo: info.isEmpty ? nil : info) }
        case .moved(let moved):
            // Invitations go to where it is now; a session recovering a link to it redials there.
            // The application is not told: the peer is the same one it found.
            let dialable = Self.dialable(moved.endpoints)
            let known = state.withLock { state -> Bool in
                guard state.peers[moved.peer.identifier] != nil else { return false }
                state.endpoints[moved.peer.identifier] = dialable
                return true
            }
            if known { DiscoveryNews.peerSeen(moved.peer.identifier, at: dialable) }
        case .lost(let lost):
            let (peer, streams) = state.withLock { state -> (MCPeerID?, [AsyncStream<Event>.Continuation]) in
                state.endpoints[lost.identifier] = nil
                return (state.peers.removeValue(forKey: lost.identifier), Array(state.streams.values))
            }
            guard let peer else { return }
            for stream in streams { stream.yield(.lost(peer)) }
            delegateQueue.async { self.delegate?.browser(self, lostPeer: peer) }
        }
    }
}
