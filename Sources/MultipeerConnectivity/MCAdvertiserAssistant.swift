import Foundation
import Logging
import MultipeerDiscovery
import Synchronization
import MultipeerProtocol

/// Apple's assistant delegate; both calls are optional, as in Apple's protocol.
public protocol MCAdvertiserAssistantDelegate: AnyObject {
    /// The prompt is about to be asked about an invitation.
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
    /// The prompt answered (or the assistant stopped while it was asking).
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
}

extension MCAdvertiserAssistantDelegate {
    public func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
    public func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
}

/// What the assistant's prompt is asked about: who invites, and the context it sent (untrusted
/// bytes, at most 4,096; nil when it sent none).
public struct MCAssistantInvitation: Sendable {
    public let peerID: MCPeerID
    public let context: Data?

    /// For exercising a prompt outside the assistant.
    public init(peerID: MCPeerID, context: Data?) {
        self.peerID = peerID
        self.context = context
    }
}

/// Apple's advertiser assistant: advertises a session and answers invitations into it. Apple's
/// shows an alert; Linux has none, so the app supplies `prompt`, which shows the invitation its
/// own way and returns true to accept (the inviter joins `session`) or false to decline.
///
/// Without a prompt every invitation is accepted, as if the person had tapped Accept: an app
/// ported unchanged keeps working instead of refusing everyone in silence. Who actually joins
/// is still decided by the session's certificate check (its delegate, or its evaluators), as
/// after Apple's alert; each such acceptance is logged at notice level to the session's
/// `configuration.logger`. Set `prompt = { _ in false }` to refuse everyone.
///
/// Prompts, the default one included, are asked one at a time, in arrival order, from a task of
/// the assistant's; the delegate is called on that task, just before and just after each one.
/// An answer given after the inviter's timeout is ignored (it gave up).
open class MCAdvertiserAssistant: NSObject, @unchecked Sendable {
    // @unchecked: the delegate, the prompt and the answering task are behind locks.

    public typealias Prompt = @Sendable (MCAssistantInvitation) async -> Bool

    public let session: MCSession
    public let discoveryInfo: [String: String]?
    public let serviceType: String
    /// Does the discovery and the invitation protocol; not public, as a delegate set on it
    /// would take the invitations away from the prompt.
    let advertiser: MCNearbyServiceAdvertiser
    private let delegateLock = NSLock()
    private weak var storedDelegate: (any MCAdvertiserAssistantDelegate)?
    private let storedPrompt: Mutex<Prompt?>
    private let answering = Mutex<Task<Void, Never>?>(nil)

    open weak var delegate: (any MCAdvertiserAssistantDelegate)? {
        get { delegateLock.withLock { storedDelegate } }
        set { delegateLock.withLock { storedDelegate = newValue } }
    }

    /// Asked about each invitation; nil (the default) accepts them all.
    public var prompt: Prompt? {
        get { storedPrompt.withLock { $0 } }
        set { storedPrompt.withLock { $0 = newValue } }
    }

    /// Apple's initialiser, the designated one (a subclass overrides it and keeps the others):
    /// an invalid service type or discoveryInfo stops the program, as Apple's raises. Set
    /// `prompt` before `start()`, or every invitation is accepted.
    public init(serviceType: String, discoveryInfo info: [String: String]?, session: MCSession) {
        let settings = InitializerSettings.take(Settings.self, for: session) ?? Settings()
        do {
            advertiser = try MCNearbyServiceAdvertiser(
                peer: session.myPeerID, discoveryInfo: info, serviceType: serviceType, configuration: settings.configuration,
                listenHost: settings.listenHost)
        } catch {
            preconditionFailure("MCAdvertiserAssistant: \(error.reason)")
        }
        self.session = session
        self.discoveryInfo = info
        self.serviceType = serviceType
        storedPrompt = Mutex(settings.prompt)
        super.init()
    }

    /// Throws `invalidParameter` with the reason for a bad service type or discoveryInfo.
    public convenience init(
        serviceType: String, discoveryInfo info: [String: String]?, session: MCSession, configuration: DiscoveryConfiguration,
        listenHost: String = "0.0.0.0", prompt: Prompt? = nil
    ) throws(MCError) {
        _ = try MCNearbyServiceAdvertiser.validated(serviceType, info)  // thrown here, not trapped on
        let settingsTicket = InitializerSettings.leave(Settings(configuration: configuration, listenHost: listenHost, prompt: prompt), for: session)
        self.init(serviceType: serviceType, discoveryInfo: info, session: session)
        InitializerSettings.discard(settingsTicket)
    }

    /// What the throwing initialiser hands to Apple's.
    private struct Settings {
        var configuration = DiscoveryConfiguration()
        var listenHost = "0.0.0.0"
        var prompt: Prompt?
    }

    /// Apple's call: advertises in the background; use `startAdvertising()` to learn of a failure.
    open func start() {
        listen()
        advertiser.startAdvertisingPeer()
    }

    open func stop() {
        stopAnswering()
        advertiser.stopAdvertisingPeer()
    }

    /// The same as `start()`, returning once advertised; throws `unavailable` when it cannot be.
    public func startAdvertising() async throws(MCError) {
        listen()
        do {
            try await advertiser.start()
        } catch {
            stopAnswering()
            throw error
        }
    }

    /// Stops advertising; a prompt still being asked is cancelled and its invitation declined.
    public func stopAdvertising() async {
        stopAnswering()
        await advertiser.stop()
    }

    /// Takes invitations from the advertiser (it has no delegate of its own, so they come here).
    private func listen() {
        let invitations = advertiser.invitations()
        let task = Task { [weak self] in
            for await invitation in invitations {
                guard let self else { return invitation.decline() }
                await self.answer(invitation)
            }
        }
        let previous = answering.withLock { current in defer { current = task }; return current }
        previous?.cancel()
    }

    private func stopAnswering() {
        answering.withLock { current in defer { current = nil }; return current }?.cancel()
    }

    /// Asks the prompt (or the default policy, which accepts) about one invitation and answers
    /// it. A stop while asking declines it, whatever the prompt then says.
    func answer(_ invitation: MCInvitation) async {
        guard !Task.isCancelled else { return invitation.decline() }
        let prompt = self.prompt ?? Self.acceptWithoutPrompt(session)
        delegate?.advertiserAssistantWillPresentInvitation(self)
        let accepted = await prompt(MCAssistantInvitation(peerID: invitation.peer, context: invitation.context.isEmpty ? nil : invitation.context))
        delegate?.advertiserAssistantDidDismissInvitation(self)
        if accepted && !Task.isCancelled { invitation.accept(into: session) } else { invitation.decline() }
    }

    /// The default policy: accept, and say so in the session's log.
    private static func acceptWithoutPrompt(_ session: MCSession) -> Prompt {
        { [logger = session.configuration.logger] invitation in
            // Named as the session's own logs name peers: display name, first identifier bytes.
            let peer = invitation.peerID.wire
            let prefix = peer.identifier.bytes.prefix(4).map { String(format: "%02x", $0) }.joined()
            logger.notice(
                "advertiser assistant: accepted an invitation without a prompt", metadata: ["peer": "\(peer.displayName) [\(prefix)]"])
            return true
        }
    }

    deinit {
        answering.withLock { $0 }?.cancel()
    }
}
