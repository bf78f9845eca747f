import Foundation
import Logging
import MultipeerDiscovery
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization

/// Apple's advertiser delegate. Invitations arrive in a later version (they need the session's
/// invitation phase, docs/PROTOCOL.md §7.2); the signature is Apple's already.
public protocol MCNearbyServiceAdvertiserDelegate: AnyObject {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void)
    /// Optional, as in Apple's protocol.
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error)
}

extension MCNearbyServiceAdvertiserDelegate {
    public func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {}
}

/// Makes a peer discoverable on the LAN over mDNS / DNS-SD (docs/PROTOCOL.md §12), as Apple's
/// class does; `start()` and `stop()` are the Swift-native, throwing way to do the same.
public final class MCNearbyServiceAdvertiser: NSObject, @unchecked Sendable {
    public let myPeerID: MCPeerID
    public let discoveryInfo: [String: String]?
    public let serviceType: String
    private let type: ServiceType
    private let listener = Mutex<(any Channel)?>(nil)
    private let delegateLock = NSLock()
    private weak var storedDelegate: (any MCNearbyServiceAdvertiserDelegate)?
    private let eventLoop: any EventLoop
    private let listenHost: String

    public weak var delegate: (any MCNearbyServiceAdvertiserDelegate)? {
        get { delegateLock.withLock { storedDelegate } }
        set { delegateLock.withLock { storedDelegate = newValue } }
    }

    /// Apple's initialiser: invalid input is a programming error and stops the program, as
    /// Apple's raises an exception. Use the throwing one to handle it.
    public convenience init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        do {
            try self.init(peer: myPeerID, discoveryInfo: info, serviceType: serviceType, configuration: DiscoveryConfiguration())
        } catch {
            preconditionFailure("MCNearbyServiceAdvertiser: \(error.reason)")
        }
    }

    /// Throws `invalidParameter` with the reason for a bad service type or discoveryInfo.
    public init(
        peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String, configuration: DiscoveryConfiguration,
        listenHost: String = "0.0.0.0"
    ) throws(MCError) {
        do {
            type = try ServiceType(serviceType)
            try DiscoveryTXT.validate(info ?? [:])
        } catch {
            throw MCError(.invalidParameter, reason: error.description)
        }
        self.myPeerID = myPeerID
        self.discoveryInfo = info
        self.serviceType = serviceType
        self.configuration = configuration
        self.listenHost = listenHost
        eventLoop = configuration.eventLoop
        super.init()
    }

    private let configuration: DiscoveryConfiguration
    private let running = Mutex<DiscoveryAdvertiser?>(nil)
    /// Start and stop, from Apple's calls or the async ones, run in order, one at a time.
    private let sequencer = OperationSequencer()

    /// Apple's call: starts in the background; a failure goes to `didNotStartAdvertisingPeer`.
    public func startAdvertisingPeer() {
        sequencer.submit {
            do throws(MCError) {
                try await self.startNow()
            } catch {
                self.delegate?.advertiser(self, didNotStartAdvertisingPeer: error)
            }
        }
    }

    public func stopAdvertisingPeer() {
        sequencer.submit { await self.stopNow() }
    }

    /// Opens the listener that peers dial to invite us, then advertises its port.
    /// Invitations themselves arrive in a later version: until then a connection is closed at once.
    public func start() async throws(MCError) {
        try await sequencer.runThrowing { () async throws(MCError) in try await self.startNow() }
    }

    private func startNow() async throws(MCError) {
        guard running.withLock({ $0 }) == nil else { return }
        let channel: any Channel
        do {
            channel = try await ServerBootstrap(group: eventLoop)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { child in child.close() }
                .bind(host: listenHost, port: 0).get()
        } catch {
            throw MCError(.unavailable, reason: "cannot listen for invitations: \(error)")
        }
        let port = UInt16(truncatingIfNeeded: channel.localAddress?.port ?? 0)
        let active: DiscoveryAdvertiser
        do {
            active = try DiscoveryAdvertiser(
                peer: myPeerID.wire, serviceType: type, discoveryInfo: discoveryInfo ?? [:], port: port,
                configuration: configuration)
            try await active.start()
        } catch {
            try? await channel.close().get()
            throw MCError(.unavailable, reason: error.description)
        }
        listener.withLock { $0 = channel }
        running.withLock { $0 = active }
    }

    /// Says goodbye on the LAN and closes the listener.
    public func stop() async {
        await sequencer.run { await self.stopNow() }
    }

    private func stopNow() async {
        let active = running.withLock { current in defer { current = nil }; return current }
        await active?.stop()
        let channel = listener.withLock { current in defer { current = nil }; return current }
        try? await channel?.close().get()
    }

    /// The advertised TCP port, while advertising.
    public var port: Int? { listener.withLock { $0?.localAddress?.port } }

    deinit {
        listener.withLock { $0 }?.close(promise: nil)
    }
}
