// turn-game: "count to 21" for two to eight players. The peers find each other, the one with the
// largest `hashValue` hosts (every peer computes the same answer: `MCPeerID.hash` is the same in
// every process), and the host deals the turns: each player in turn adds 1, 2 or 3 to the
// total, and whoever reaches the target wins. Moves are Codable messages.
//
//   turn-game --service mpc-game --name alice --players 3 [--target 21] [--timeout 60]
//
// Prints `ME <name> <hash>`, `HOST <name>`, `TURN <name> <total>`, `MOVE <name> <count> <total>`,
// `WINNER <name>`; exits 0 once the game is over, 1 on a failure and 2 at the time limit.
import MultipeerConnectivity

/// What goes over the wire, as JSON. The host sends `start`, `turn`, `moved` and `over`; the
/// player whose turn it is answers with `move`.
enum GameMessage: Codable {
    case start(host: String, order: [String], target: Int)
    case turn(player: String, total: Int)
    case move(count: Int)
    case moved(player: String, count: Int, total: Int)
    case over(winner: String, total: Int)
    /// "I know the outcome": the players may leave once all have said it.
    case bye
}

struct Options {
    var serviceType = "mpc-game"
    var displayName = ProcessInfo.processInfo.hostName
    var players = 2
    var target = 21
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
            case "--players": options.players = Int(value(flag)) ?? 0
            case "--target": options.target = Int(value(flag)) ?? 0
            case "--timeout": options.timeout = Double(value(flag)) ?? 0
            default: usage("unknown argument \(flag)")
            }
        }
        guard (2...8).contains(options.players), options.target >= 1, options.timeout > 0 else { usage("bad value") }
        return options
    }

    static func usage(_ problem: String) -> Never {
        print("turn-game: \(problem)")
        print("usage: turn-game [--service TYPE] [--name NAME] [--players N] [--target T] [--timeout SECONDS]")
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
final class TurnGame: NSObject {
    let options: Options
    let myPeerID: MCPeerID
    let session: MCSession
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser
    private let encoder = JSONEncoder()
    private let decoder = JSONDecoder()

    private var nearby: Set<MCPeerID> = []
    private var connected: Set<MCPeerID> = []
    /// Elected once every player is connected.
    private var host: MCPeerID?
    /// Messages that arrived before this peer had the whole table (and so its own vote).
    private var early: [(GameMessage, MCPeerID)] = []
    private var gameOver = false
    private var saidBye: Set<MCPeerID> = []
    private var leaving = false

    // The host's table.
    private var order: [MCPeerID] = []
    private var turn = 0
    private var total = 0

    init(options: Options) {
        self.options = options
        myPeerID = MCPeerID(displayName: options.displayName)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        advertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: nil, serviceType: options.serviceType)
        browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: options.serviceType)
        super.init()
        session.delegate = self
        advertiser.delegate = self
        browser.delegate = self
    }

    func start() {
        say("ME \(myPeerID.displayName) \(myPeerID.hashValue)")
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
    }

    private func inviteIfMine(_ peerID: MCPeerID) {
        guard host == nil, myPeerID.hashValue > peerID.hashValue, nearby.contains(peerID), !connected.contains(peerID) else { return }
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
    }

    // MARK: The election

    /// Everyone is here: the largest hash hosts. Each peer votes alone and reaches the same answer.
    private func electHostIfEveryoneIsHere() {
        guard host == nil, connected.count == options.players - 1 else { return }
        let table = [myPeerID] + connected
        let elected = table.max { $0.hashValue < $1.hashValue }!
        host = elected
        say("HOST \(elected.displayName)")
        // Stop looking: the table is full.
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        if elected == myPeerID {
            order = table.sorted { $0.hashValue > $1.hashValue }
            broadcast(.start(host: myPeerID.displayName, order: order.map(\.displayName), target: options.target))
            dealTurn()
        }
        let waiting = early
        early.removeAll()
        for (message, peerID) in waiting { handle(message, from: peerID) }
    }

    // MARK: The host

    private func dealTurn() {
        let player = order[turn % order.count]
        broadcast(.turn(player: player.displayName, total: total))
        say("TURN \(player.displayName) \(total)")
        if player == myPeerID { apply(chooseCount(), by: myPeerID) }
    }

    private func apply(_ count: Int, by player: MCPeerID) {
        guard player == order[turn % order.count] else { return fail("\(player.displayName) moved out of turn") }
        guard (1...3).contains(count), total + count <= options.target else { return fail("\(player.displayName) moved \(count) at \(total)") }
        total += count
        broadcast(.moved(player: player.displayName, count: count, total: total))
        say("MOVE \(player.displayName) \(count) \(total)")
        if total == options.target {
            broadcast(.over(winner: player.displayName, total: total))
            finish(winner: player.displayName)
        } else {
            turn += 1
            dealTurn()
        }
    }

    // MARK: Every player

    /// Leaves the others a multiple of four when it can (the winning strategy for a target of 21).
    private func chooseCount() -> Int {
        let left = options.target - total
        let count = left % 4
        return count == 0 ? 1 : count
    }

    private func handle(_ message: GameMessage, from peerID: MCPeerID) {
        if case .bye = message {
            saidBye.insert(peerID)
            return checkEveryoneLeaves()
        }
        guard let host else {
            early.append((message, peerID))
            return
        }
        switch message {
        case .start(let name, let order, _):
            guard name == host.displayName, peerID == host else { return fail("\(peerID.displayName) started a game as \(name), but \(host.displayName) hosts") }
            say("ORDER \(order.joined(separator: ","))")
        case .turn(let player, let total):
            guard peerID == host else { return fail("a turn dealt by \(peerID.displayName)") }
            say("TURN \(player) \(total)")
            if player == myPeerID.displayName {
                self.total = total
                send(.move(count: chooseCount()), to: [host])
            }
        case .move(let count):
            guard host == myPeerID else { return fail("a move sent to a player who does not host") }
            apply(count, by: peerID)
        case .moved(let player, let count, let total):
            say("MOVE \(player) \(count) \(total)")
        case .over(let winner, _):
            finish(winner: winner)
        case .bye:
            break
        }
    }

    private func finish(winner: String) {
        gameOver = true
        say("WINNER \(winner)")
        broadcast(.bye)
        checkEveryoneLeaves()
    }

    /// Everyone knows the outcome once each has said bye (or left after the end).
    private func checkEveryoneLeaves() {
        guard gameOver, !leaving, connected.allSatisfy(saidBye.contains) else { return }
        leaving = true
        say("DONE")
        session.disconnect()
        DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { exit(0) }
    }

    private func broadcast(_ message: GameMessage) {
        send(message, to: Array(connected))
    }

    private func send(_ message: GameMessage, to peers: [MCPeerID]) {
        guard !peers.isEmpty else { return }
        do {
            try session.send(try encoder.encode(message), toPeers: peers, with: .reliable)
        } catch {
            fail("cannot send: \(error)")
        }
    }

    func fail(_ reason: String) {
        say("FAIL \(reason)")
        exit(1)
    }

    func timedOut() {
        say("TIMEOUT connected=\(connected.map(\.displayName).sorted().joined(separator: ",")) host=\(host?.displayName ?? "none")")
        exit(2)
    }

    // MARK: Events, on the main queue

    fileprivate func peer(_ peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected:
            connected.insert(peerID)
            say("CONNECTED \(peerID.displayName)")
            electHostIfEveryoneIsHere()
        case .notConnected:
            if connected.remove(peerID) != nil { say("DISCONNECTED \(peerID.displayName)") }
            guard host != nil else {
                // Before the game: a declined or timed-out invitation, or a player gone. Try again.
                DispatchQueue.main.asyncAfter(deadline: .now() + 1) { self.inviteIfMine(peerID) }
                return
            }
            if !gameOver { return fail("\(peerID.displayName) left the game") }
            checkEveryoneLeaves()
        case .connecting:
            break
        @unknown default:
            break
        }
    }

    fileprivate func receive(_ data: Data, from peerID: MCPeerID) {
        guard let message = try? decoder.decode(GameMessage.self, from: data) else { return fail("undecodable message from \(peerID.displayName)") }
        handle(message, from: peerID)
    }

    fileprivate func found(_ peerID: MCPeerID) {
        guard peerID != myPeerID, nearby.insert(peerID).inserted else { return }
        inviteIfMine(peerID)
    }

    fileprivate func lost(_ peerID: MCPeerID) {
        nearby.remove(peerID)
    }
}

extension TurnGame: MCSessionDelegate {
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

extension TurnGame: MCNearbyServiceAdvertiserDelegate {
    nonisolated func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        // A full table turns latecomers away.
        invitationHandler(session.connectedPeers.count < options.players - 1, session)
    }

    nonisolated func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        DispatchQueue.main.async { self.fail("cannot advertise: \(error)") }
    }
}

extension TurnGame: MCNearbyServiceBrowserDelegate {
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
let game = TurnGame(options: options)
game.start()
DispatchQueue.main.asyncAfter(deadline: .now() + options.timeout) { game.timedOut() }
dispatchMain()
