import Foundation
import Logging
import MultipeerDiscovery
import MultipeerSession
import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// Apple's advertiser delegate. Invitations (docs/PROTOCOL.md §7.2) arrive on a private serial
/// queue; call the handler once, with `true` and the session to join, or `false`.
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
open class MCNearbyServiceAdvertiser: NSObject, @unchecked Sendable {
    public let myPeerID: MCPeerID
    public let discoveryInfo: [String: String]?
    public let serviceType: String
    private let type: ServiceType
    private let listener = Mutex<InvitationListener?>(nil)
    private let delegateLock = NSLock()
    private weak var storedDelegate: (any MCNearbyServiceAdvertiserDelegate)?
    private let eventLoop: any EventLoop
    private let listenHost: String
    private let delegateQueue: DispatchQueue
    private let invitationStreams = Mutex<[UUID: AsyncStream<MCInvitation>.Continuation]>([:])

    open weak var delegate: (any MCNearbyServiceAdvertiserDelegate)? {
        get { delegateLock.withLock { storedDelegate } }
        set { delegateLock.withLock { storedDelegate = newValue } }
    }

    /// Apple's initialiser, the designated one (a subclass overrides it and keeps the others):
    /// invalid input is a programming error and stops the program, as Apple's raises an
    /// exception. Use the throwing one to handle it.
    public init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        let settings = InitializerSettings.take(Settings.self, for: myPeerID) ?? Settings()
        do {
            type = try Self.validated(serviceType, info)
        } catch {
            preconditionFailure("MCNearbyServiceAdvertiser: \(error.reason)")
        }
        self.myPeerID = myPeerID
        self.discoveryInfo = info
        self.serviceType = serviceType
        self.configuration = settings.configuration
        self.listenHost = settings.listenHost
        eventLoop = settings.configuration.eventLoop
        delegateQueue = DispatchQueue(label: "MCNearbyServiceAdvertiser.delegate.\(serviceType)")
        super.init()
    }

    /// Throws `invalidParameter` with the reason for a bad service type or discoveryInfo.
    public convenience init(
        peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String, configuration: DiscoveryConfiguration,
        listenHost: String = "0.0.0.0"
    ) throws(MCError) {
        _ = try Self.validated(serviceType, info)
        let settingsTicket = InitializerSettings.leave(Settings(configuration: configuration, listenHost: listenHost), for: myPeerID)
        self.init(peer: myPeerID, discoveryInfo: info, serviceType: serviceType)
        InitializerSettings.discard(settingsTicket)
    }

    /// What the throwing initialiser hands to Apple's.
    private struct Settings {
        var configuration = DiscoveryConfiguration()
        var listenHost = "0.0.0.0"
    }

    /// The service type, or `invalidParameter` for it or for `info`.
    static func validated(_ serviceType: String, _ info: [String: String]?) throws(MCError) -> ServiceType {
        do {
            let type = try ServiceType(serviceType)
            try DiscoveryTXT.validate(info ?? [:])
            return type
        } catch {
            throw MCError(.invalidParameter, reason: error.description)
        }
    }

    /// Invitations from now on, for async code, when no delegate is set (the delegate gets them
    /// first, as Apple's). Each must be accepted or declined; unanswered ones time out.
    public func invitations() -> AsyncStream<MCInvitation> {
        let (stream, continuation) = AsyncStream<MCInvitation>.makeStream(bufferingPolicy: .bufferingNewest(InvitationListener.maximumPending))
        let id = UUID()
        invitationStreams.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in self?.invitationStreams.withLock { _ = $0.removeValue(forKey: id) } }
        return stream
    }

    private let configuration: DiscoveryConfiguration
    private let running = Mutex<DiscoveryAdvertiser?>(nil)
    /// Start and stop, from Apple's calls or the async ones, run in order, one at a time.
    private let sequencer = OperationSequencer()

    /// Apple's call: starts in the background; a failure goes to `didNotStartAdvertisingPeer`.
    open func startAdvertisingPeer() {
        sequencer.submit {
            do throws(MCError) {
                try await self.startNow()
            } catch {
                self.delegate?.advertiser(self, didNotStartAdvertisingPeer: error)
            }
        }
    }

    open func stopAdvertisingPeer() {
        sequencer.submit { await self.stopNow() }
    }

    /// Opens the listener that peers dial to invite us, then advertises its port.
    public func start() async throws(MCError) {
        try await sequencer.runThrowing { () async throws(MCError) in try await self.startNow() }
    }

    private func startNow() async throws(MCError) {
        guard running.withLock({ $0 }) == nil else { return }
        let channel: InvitationListener
        do {
            channel = try await InvitationListener.bind(host: listenHost, localPeer: myPeerID.wire, eventLoop: eventLoop) {
                [weak self] request, reply in self?.received(request, reply: reply)
            }
        } catch {
            throw MCError(.unavailable, reason: "cannot listen for invitations: \(error)")
        }
        let port = UInt16(truncatingIfNeeded: channel.port ?? 0)
        let active: DiscoveryAdvertiser
        do {
            active = try DiscoveryAdvertiser(
                peer: myPeerID.wire, serviceType: type, discoveryInfo: discoveryInfo ?? [:], port: port,
                configuration: configuration)
            try await active.start()
        } catch {
            await channel.close()
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
        await channel?.close()
    }

    // MARK: Invitations

    private func received(_ request: InvitationRequest, reply: InvitationReply) {
        let inviter = MCPeerID(wire: request.peer)
        let context = Data(request.invitation.context.readableBytesView)
        // The listener's core takes the first answer and drops any later one.
        let respond: @Sendable (MCSession?) -> Void = { session in
            guard let session, let facts = session.invitingSession else { return reply.decline() }
            reply.accept(into: facts) { await session.connectionData(forInviter: request.peer) }
        }
        if delegate != nil {
            delegateQueue.async {
                // Read again on the queue: the delegate is the app's, not Sendable.
                guard let delegate = self.delegate else { return respond(nil) }
                delegate.advertiser(self, didReceiveInvitationFromPeer: inviter, withContext: context.isEmpty ? nil : context) { accept, session in
                    respond(accept ? session : nil)
                }
            }
            return
        }
        let streams = invitationStreams.withLock { Array($0.values) }
        guard let stream = streams.first else { return respond(nil) }  // nobody to ask: declined
        stream.yield(MCInvitation(peer: inviter, context: context, respond: respond))
    }

    /// The advertised TCP port, while advertising.
    public var port: Int? { listener.withLock { $0?.port } }

    deinit {
        listener.withLock { $0 }?.closeNow()
    }
}

/// An invitation for async code (`MCNearbyServiceAdvertiser.invitations()`): accept it into a
/// session or decline it, once; one left unanswered times out (the inviter chose how long).
public struct MCInvitation: Sendable {
    public let peer: MCPeerID
    /// The inviter's context: untrusted bytes, at most 4,096.
    public let context: Data
    let respond: @Sendable (MCSession?) -> Void

    /// Joins `session`: the inviter dials it, and both sides' certificate checks follow.
    public func accept(into session: MCSession) { respond(session) }

    public func decline() { respond(nil) }
}
