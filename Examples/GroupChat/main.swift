// group-chat: peers that advertise and browse one service type, invite each other, and exchange
// Codable chat messages. Written as an app for Apple's platforms is: delegates, DispatchQueue.main,
// and nothing but `import MultipeerConnectivity`.
//
//   group-chat --service mpc-chat --name alice --peers 3 --messages 5    scripted: send 5, receive 5 from each
//   group-chat --service mpc-chat --name alice                           interactive: type lines, Ctrl-D to leave
//
// Prints one line per event (`STARTED`, `CONNECTED <name>`, `RECEIVED <from> <number> <text>`,
// `DONE ...`); exits 0 once every message arrived on this peer, 1 on a failure and 2 at the
// time limit (--timeout seconds, 60 by default).
import MultipeerConnectivity

/// What goes over the wire, as JSON.
struct ChatMessage: Codable {
    enum Kind: String, Codable {
        case text
        /// "I have every message of everyone": the group may break up once all have said it.
        case bye
    }

    var kind: Kind
    var number: Int
    var text: String
    var sentAt: Date
}

struct Options {
    var serviceType = "mpc-chat"
    var displayName = ProcessInfo.processInfo.hostName
    /// How many peers make the group, this one included (scripted mode).
    var peers = 2
    /// nil: interactive.
    var messages: Int?
    var timeout: Double = 60

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments[...]
        func value(_ flag: String) -> String {
            guard let value = rest.popFirst() else { usage("\(flag) needs a value") }
            return value
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--service": options.serviceType = value(flag)
            case "--name": options.displayName = value(flag)
            case "--peers": options.peers = Int(value(flag)) ?? 0
            case "--messages": options.messages = Int(value(flag))
            case "--timeout": options.timeout = Double(value(flag)) ?? 0
            default: usage("unknown argument \(flag)")
            }
        }
        guard options.peers >= 2, options.timeout > 0, options.messages.map({ $0 >= 1 }) ?? true else { usage("bad value") }
        return options
    }

    static func usage(_ problem: String) -> Never {
        print("group-chat: \(problem)")
        print("usage: group-chat [--service TYPE] [--name NAME] [--peers N --messages M] [--timeout SECONDS]")
        exit(64)
    }
}

/// Prints a line at once, even into a pipe (where `print` would hold it in a buffer).
/// One output line. Names and messages come from peers: their control characters (a newline
/// among them) are shown as "?", so a peer can neither forge a line nor drive the terminal.
func say(_ line: String) {
    let safe = String(String.UnicodeScalarView(line.unicodeScalars.map { CharacterSet.controlCharacters.contains($0) ? "?" : $0 }))
    FileHandle.standardOutput.write(Data((safe + "\n").utf8))
}

@MainActor
final class GroupChat: NSObject {
    let options: Options
    let myPeerID: MCPeerID
    let session: MCSession
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser
    private let encoder = JSONEncoder()
    private let decoder = JSONDecoder()

    private var nearby: Set<MCPeerID> = []
    private var connected: Set<MCPeerID> = []
    /// Per peer, how many of its messages arrived (in order: `.reliable` keeps it).
    private var received: [MCPeerID: Int] = [:]
    private var saidBye: Set<MCPeerID> = []
    private var chatting = false
    private var sentBye = false
    private var typed = 0
    private var leaving = false

    init(options: Options) {
        self.options = options
        myPeerID = MCPeerID(displayName: options.displayName)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        advertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: ["app": "group-chat"], serviceType: options.serviceType)
        browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: options.serviceType)
        super.init()
        session.delegate = self
        advertiser.delegate = self
        browser.delegate = self
    }

    func start() {
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
        say("STARTED \(myPeerID.displayName)")
    }

    /// Two peers that find each other would both invite; only the one with the larger hash does.
    /// (`MCPeerID.hash` is the same number in every process, so both reach the same answer.)
    private func inviteIfMine(_ peerID: MCPeerID) {
        guard myPeerID.hashValue > peerID.hashValue, nearby.contains(peerID), !connected.contains(peerID) else { return }
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
    }

    // MARK: Chat

    private func send(_ message: ChatMessage, to peers: [MCPeerID]) {
        guard !peers.isEmpty else { return }
        do {
            try session.send(try encoder.encode(message), toPeers: peers, with: .reliable)
        } catch {
            fail("cannot send: \(error)")
        }
    }

    /// Scripted mode: once the whole group is here, everyone sends its messages to everyone.
    private func startChattingIfEveryoneIsHere() {
        guard let count = options.messages, !chatting, connected.count == options.peers - 1 else { return }
        chatting = true
        say("GROUP \(([myPeerID] + connected).map(\.displayName).sorted().joined(separator: ","))")
        for number in 1...count {
            send(ChatMessage(kind: .text, number: number, text: "hello-\(number)-from-\(myPeerID.displayName)", sentAt: Date()), to: Array(connected))
        }
        say("SENT \(count)")
        checkFinished()
    }

    /// Interactive mode: a line typed is a message to everyone connected.
    func type(_ line: String) {
        typed += 1
        send(ChatMessage(kind: .text, number: typed, text: line, sentAt: Date()), to: Array(connected))
    }

    private func receive(_ data: Data, from peerID: MCPeerID) {
        guard let message = try? decoder.decode(ChatMessage.self, from: data) else { return fail("undecodable message from \(peerID.displayName)") }
        switch message.kind {
        case .text:
            let expected = (received[peerID] ?? 0) + 1
            guard options.messages == nil || message.number == expected else {
                return fail("message \(message.number) from \(peerID.displayName), expected \(expected)")
            }
            received[peerID] = expected
            if options.messages == nil {
                say("\(peerID.displayName): \(message.text)")
            } else {
                say("RECEIVED \(peerID.displayName) \(message.number) \(message.text)")
            }
        case .bye:
            saidBye.insert(peerID)
        }
        checkFinished()
    }

    private func hasEverything(from peerID: MCPeerID) -> Bool {
        (received[peerID] ?? 0) == options.messages
    }

    /// Says bye once every message of every peer is here, and leaves once everyone said it
    /// (or left after sending all of theirs): nobody disconnects while another still waits.
    private func checkFinished() {
        guard chatting, !leaving, let count = options.messages else { return }
        let others = connected.union(saidBye).union(received.keys)
        guard others.count == options.peers - 1, others.allSatisfy(hasEverything) else { return }
        if !sentBye {
            sentBye = true
            send(ChatMessage(kind: .bye, number: 0, text: "", sentAt: Date()), to: Array(connected))
        }
        guard others.allSatisfy({ saidBye.contains($0) || !connected.contains($0) }) else { return }
        say("DONE \(others.count * count) messages from \(others.count) peers")
        leave(status: 0)
    }

    func leave(status: Int32) {
        guard !leaving else { return }
        leaving = true
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        session.disconnect()
        // The goodbyes go out on the session's thread; give them a moment.
        DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { exit(status) }
    }

    func fail(_ reason: String) {
        say("FAIL \(reason)")
        exit(1)
    }

    func timedOut() {
        let counts = received.map { "\($0.key.displayName)=\($0.value)" }.sorted().joined(separator: ",")
        say("TIMEOUT connected=\(connected.map(\.displayName).sorted().joined(separator: ",")) received=\(counts)")
        exit(2)
    }

    // MARK: Events, on the main queue

    fileprivate func peer(_ peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected:
            connected.insert(peerID)
            say("CONNECTED \(peerID.displayName)")
            startChattingIfEveryoneIsHere()
        case .notConnected:
            let wasConnected = connected.remove(peerID) != nil
            if wasConnected { say("DISCONNECTED \(peerID.displayName)") }
            if chatting, options.messages != nil, !hasEverything(from: peerID) {
                return fail("\(peerID.displayName) left before all its messages arrived")
            }
            if chatting { return checkFinished() }
            // Not in the group yet (a declined or timed-out invitation): try again.
            DispatchQueue.main.asyncAfter(deadline: .now() + 1) { self.inviteIfMine(peerID) }
        case .connecting:
            break
        @unknown default:
            break
        }
    }

    fileprivate func found(_ peerID: MCPeerID) {
        guard peerID != myPeerID, nearby.insert(peerID).inserted else { return }
        say("FOUND \(peerID.displayName)")
        inviteIfMine(peerID)
    }

    fileprivate func lost(_ peerID: MCPeerID) {
        nearby.remove(peerID)
    }
}

extension GroupChat: MCSessionDelegate {
    nonisolated func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        DispatchQueue.main.async { self.peer(peerID, didChange: state) }
    }

    nonisolated func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        DispatchQueue.main.async { self.receive(data, from: peerID) }
    }

    nonisolated func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}

    nonisolated func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress
    ) {}

    nonisolated func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?,
        withError error: (any Error)?
    ) {}
}

extension GroupChat: MCNearbyServiceAdvertiserDelegate {
    nonisolated func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        // Everyone who runs the app with this service type is welcome.
        invitationHandler(true, session)
    }

    nonisolated func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        DispatchQueue.main.async { self.fail("cannot advertise: \(error)") }
    }
}

extension GroupChat: MCNearbyServiceBrowserDelegate {
    nonisolated func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {
        DispatchQueue.main.async { self.found(peerID) }
    }

    nonisolated func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        DispatchQueue.main.async { self.lost(peerID) }
    }

    nonisolated func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        DispatchQueue.main.async { self.fail("cannot browse: \(error)") }
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let chat = GroupChat(options: options)
chat.start()
if options.messages != nil {
    DispatchQueue.main.asyncAfter(deadline: .now() + options.timeout) { chat.timedOut() }
} else {
    // Interactive: each line typed goes to the group; the end of input leaves it.
    Thread.detachNewThread {
        while let line = readLine() {
            DispatchQueue.main.async { chat.type(line) }
        }
        DispatchQueue.main.async { chat.leave(status: 0) }
    }
}
dispatchMain()
