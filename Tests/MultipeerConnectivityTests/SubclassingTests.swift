import MultipeerConnectivity
import MultipeerTestSupport
import Testing

// Apps subclass Apple's classes. Each subclass restates `@unchecked Sendable`: the library's
// classes are Sendable, and Swift asks a subclass to say that its own state is safe too.

/// A session that counts what it sends, overriding Apple's designated initializer.
private final class GameSession: MCSession, @unchecked Sendable {
    let table: String
    private let lock = NSLock()
    private var sent = 0

    var messagesSent: Int { lock.withLock { sent } }

    override init(peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
        table = "table 1"
        super.init(peer: myPeerID, securityIdentity: identity, encryptionPreference: encryptionPreference)
    }

    override func send(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws {
        try super.send(data, toPeers: peerIDs, with: mode)
        lock.withLock { sent += 1 }
    }
}

/// A subclass whose override hands `super.init` a copy of the peer ID it was given, equal but
/// another object, as one that unarchives or wraps it does.
private final class CopyingSession: MCSession, @unchecked Sendable {
    override init(peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
        let copy = try! MCPeerID(wireRepresentation: myPeerID.wireRepresentation)
        super.init(peer: copy, securityIdentity: identity, encryptionPreference: encryptionPreference)
    }
}

/// A subclass that adds nothing but a method, as many apps' do. Not private: NSKeyedArchiver
/// names the class it archives, and Foundation cannot name a private one.
final class SubclassedPlayer: MCPeerID, @unchecked Sendable {
    var greeting: String { "hello from \(displayName)" }
}

private final class RoomAdvertiser: MCNearbyServiceAdvertiser, @unchecked Sendable {
    override init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        super.init(peer: myPeerID, discoveryInfo: (info ?? [:]).merging(["room": "1"]) { $1 }, serviceType: serviceType)
    }
}

private final class RoomBrowser: MCNearbyServiceBrowser, @unchecked Sendable {}
private final class RoomAssistant: MCAdvertiserAssistant, @unchecked Sendable {}
private final class RoomPicker: MCBrowserViewController, @unchecked Sendable {}

/// Apple's delegate, reporting what arrives to streams.
private final class Table: NSObject, MCSessionDelegate, Sendable {
    let states: AsyncStream<(MCPeerID, MCSessionState)>
    let messages: AsyncStream<Data>
    private let stateContinuation: AsyncStream<(MCPeerID, MCSessionState)>.Continuation
    private let messageContinuation: AsyncStream<Data>.Continuation

    override init() {
        (states, stateContinuation) = AsyncStream.makeStream()
        (messages, messageContinuation) = AsyncStream.makeStream()
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        stateContinuation.yield((peerID, state))
    }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) { messageContinuation.yield(data) }
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

@Suite("Subclassing Apple's classes")
struct SubclassingTests {
    @Test func aSessionSubclassConnectsAndSendsThroughItsOverride() async throws {
        // Inherited initializers reach the subclass's override, the library's settings included.
        let host = GameSession(peer: SubclassedPlayer(displayName: "host"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let guest = GameSession(peer: MCPeerID(displayName: "guest"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        #expect(host.table == "table 1" && host.configuration.listenAddress == "127.0.0.1")
        #expect(guest.configuration.listenAddress == "127.0.0.1")
        #expect((host.myPeerID as? SubclassedPlayer)?.greeting == "hello from host")
        let plain = GameSession(peer: MCPeerID(displayName: "plain"))
        #expect(plain.encryptionPreference == .optional && plain.configuration.listenAddress == "0.0.0.0")

        let hostTable = Table()
        let guestTable = Table()
        host.delegate = hostTable
        guest.delegate = guestTable
        let data = try await host.nearbyConnectionData(forPeer: guest.myPeerID)
        guest.connectPeer(host.myPeerID, withNearbyConnectionData: data)
        let hostPeer = host.myPeerID
        _ = try await firstMatch(in: guestTable.states, seconds: 20) { peer, state in
            peer == hostPeer && state == .connected ? true : nil
        }

        try guest.send(Data("deal".utf8), toPeers: [hostPeer], with: .reliable)
        let received = try await firstMatch(in: hostTable.messages, seconds: 20) { $0 }
        #expect(received == Data("deal".utf8))
        #expect(guest.messagesSent == 1)
        host.disconnect()
        guest.disconnect()
    }

    /// The library's settings reach the designated initializer even when an override passes
    /// another (equal) peer ID on: a loopback-only session must not start listening everywhere.
    @Test func settingsSurviveAnOverrideThatPassesAnotherPeerObject() {
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.maximumPendingConnections = 17
        let session = CopyingSession(
            peer: MCPeerID(displayName: "copy"), securityIdentity: nil, encryptionPreference: .required, configuration: configuration)
        #expect(session.configuration.listenAddress == "127.0.0.1")
        #expect(session.configuration.maximumPendingConnections == 17)
        // Nothing is left behind for the next object made on this thread.
        let plain = MCSession(peer: MCPeerID(displayName: "plain"), securityIdentity: nil, encryptionPreference: .required)
        #expect(plain.configuration.maximumPendingConnections == MCSessionConfiguration().maximumPendingConnections)
    }

    @Test func discoveryClassesSubclassWithAppleInitializers() throws {
        let me = SubclassedPlayer(displayName: "me")
        let session = MCSession(peer: me)
        let advertiser = RoomAdvertiser(peer: me, discoveryInfo: nil, serviceType: "mpc-rooms")
        #expect(advertiser.discoveryInfo == ["room": "1"])
        let browser = RoomBrowser(peer: me, serviceType: "mpc-rooms")
        #expect(browser.serviceType == "mpc-rooms")
        let assistant = RoomAssistant(serviceType: "mpc-rooms", discoveryInfo: nil, session: session)
        #expect(assistant.session === session)
        let picker = RoomPicker(serviceType: "mpc-rooms", session: session)
        #expect(picker.maximumNumberOfPeers == kMCSessionMaximumNumberOfPeers)
        let archived = try NSKeyedArchiver.archivedData(withRootObject: me, requiringSecureCoding: true)
        let restored = try NSKeyedUnarchiver.unarchivedObject(ofClass: SubclassedPlayer.self, from: archived)
        #expect(restored == me && restored?.hash == me.hash)
    }
}

// Delegates that implement only Apple's required methods: the optional ones have defaults.
private final class OnlyRequiredAdvertiserDelegate: NSObject, MCNearbyServiceAdvertiserDelegate {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) { invitationHandler(false, nil) }
}

private final class OnlyRequiredBrowserDelegate: NSObject, MCNearbyServiceBrowserDelegate {
    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {}
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
}

private final class OnlyRequiredAssistantDelegate: NSObject, MCAdvertiserAssistantDelegate {}

private final class OnlyRequiredPickerDelegate: NSObject, MCBrowserViewControllerDelegate {
    func browserViewControllerDidFinish(_ browserViewController: MCBrowserViewController) {}
    func browserViewControllerWasCancelled(_ browserViewController: MCBrowserViewController) {}
}

extension SubclassingTests {
    @Test func delegatesNeedOnlyApplesRequiredMethods() {
        let picker = OnlyRequiredPickerDelegate()
        let model = MCBrowserViewController(serviceType: "mpc-rooms", session: MCSession(peer: MCPeerID(displayName: "me")))
        // Apple's optional method, answered by the default: every peer is shown.
        #expect(picker.browserViewController(model, shouldPresentNearbyPeer: MCPeerID(displayName: "other"), withDiscoveryInfo: nil))
        _ = (OnlyRequiredAdvertiserDelegate(), OnlyRequiredBrowserDelegate(), OnlyRequiredAssistantDelegate())
    }
}
