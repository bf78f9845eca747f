import Foundation
import MultipeerConnectivity
import Synchronization

/// `multipeer chat`: the browser model for the nearby list, the assistant for invitations, the
/// session for lines and files, and the terminal for all of it.
final class ChatSession: Sendable {
    let session: MCSession
    let model: MCBrowserModel
    let assistant: MCAdvertiserAssistant
    let console: Console
    let board: TransferBoard
    let files: ReceivedFiles
    let stopper = Stopper()
    let nearby = NearbyList()
    /// Keys of incoming transfers by sender and name, in arrival order.
    private let incoming = Mutex<[IncomingName: [String]]>([:])

    private struct IncomingName: Hashable {
        let peer: MCPeerID
        let name: String
    }
    private let transferCounter = Atomic<Int>(0)
    /// Peers seen connected, so that only they are announced as leaving.
    private let members = Mutex<Set<MCPeerID>>([])

    init(options: PeerOptions, files: ReceivedFiles, console: Console) throws(AppFailure) {
        self.console = console
        self.files = files
        board = TransferBoard(console: console)
        let policy: TrustPolicy
        (session, policy) = try options.makeSession(console: console)
        do {
            model = try MCBrowserModel(serviceType: options.service, session: session, configuration: options.discovery)
            assistant = try MCAdvertiserAssistant(
                serviceType: options.service, discoveryInfo: ["app": "multipeer"], session: session, configuration: options.discovery,
                listenHost: PeerOptions.listenHost)
        } catch {
            throw AppFailure(.setup, "--service \(options.service): \(error.reason)")
        }
        // The invitation is not authenticated (docs/PROTOCOL.md §7.2): who the inviter is shows
        // in the trust step after an acceptance.
        let next = policy.asksPerson ? " You will see its certificate and compare pairing codes next" : ""
        assistant.prompt = { [console] invitation in
            let name = Terminal.safe(invitation.peerID.displayName)
            let context = invitation.context.map { " (\"\(Terminal.safe(String(decoding: $0, as: UTF8.self), limit: 200))\")" } ?? ""
            // Answered before the inviter's 30 s run out.
            return await console.ask("\(name) invites you\(context). Accept?\(next)", within: 25)
        }
    }

    func run() async throws(AppFailure) {
        stopper.catchSignals()
        let events = session.events()
        let snapshots = model.snapshots()
        do {
            try await assistant.startAdvertising()
            try await model.start()
        } catch {
            throw AppFailure(.setup, "discovery unavailable: \(error.reason)")
        }
        console.say("looking for peers of service \(assistant.serviceType); /help lists the commands")
        let tasks = [
            Task { await self.follow(events) },
            Task { await self.follow(snapshots) },
            Task { await self.read(InputLines.start()) },
        ]
        let reason = await stopper.wait()
        console.endInput()
        for task in tasks { task.cancel() }
        await assistant.stopAdvertising()
        model.stop()
        await session.disconnectAndWait()
        console.say(reason == .interrupted ? "interrupted: left the chat" : "left the chat")
    }

    // MARK: Input

    private func read(_ lines: AsyncStream<String>) async {
        for await line in lines {
            if console.answer(with: line) { continue }
            if console.isAsking && !line.hasPrefix("/") {
                console.repeatQuestion()
                continue
            }
            handle(line)
            if stopper.reason != nil { return }
        }
        stopper.request(.endOfInput)
    }

    private func handle(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return }
        guard trimmed.hasPrefix("/") else { return say(trimmed) }
        let parts = trimmed.split(separator: " ", maxSplits: 1).map(String.init)
        let argument = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
        switch parts[0] {
        case "/quit", "/exit": stopper.request(.quit)
        case "/help": console.say("commands: /nearby, /invite NUMBER|NAME, /peers, /send PATH, /quit")
        case "/nearby": console.say(nearby.describe(model.snapshot))
        case "/peers": showPeers()
        case "/invite": invite(argument)
        case "/send": send(argument)
        default: console.say("unknown command \(Terminal.safe(parts[0])); /help lists the commands")
        }
    }

    /// Never waits: a peer that stops reading must not freeze the keyboard. A full queue to
    /// anyone means the line goes to nobody (it says so).
    private func say(_ text: String) {
        let peers = session.connectedPeers
        guard !peers.isEmpty else { return console.say("nobody is connected yet: /invite a peer from the nearby list") }
        do {
            try session.sendChecked(Data(text.utf8), toPeers: peers, with: .reliable)
        } catch {
            console.say("not sent: \(error.reason)")
        }
    }

    private func showPeers() {
        let peers = session.connectedPeers
        console.say(peers.isEmpty ? "connected: nobody" : "connected: " + peers.map { Terminal.safe($0.displayName) }.joined(separator: ", "))
    }

    private func invite(_ argument: String) {
        let snapshot = model.snapshot
        guard let row = nearby.find(argument, in: snapshot) else {
            return console.say("no nearby peer \(Terminal.safe(argument)); /nearby lists them")
        }
        let name = Terminal.safe(row.peerID.displayName)
        guard model.invite(row.peerID, context: Data("multipeer chat".utf8), timeout: 30) else {
            return console.say("cannot invite \(name) now (\(NearbyList.describe(row.state)))")
        }
        console.say("invited \(name); waiting for an answer")
    }

    private func send(_ path: String) {
        guard !path.isEmpty else { return console.say("usage: /send PATH") }
        let url = URL(fileURLWithPath: (path as NSString).expandingTildeInPath)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue,
            FileManager.default.isReadableFile(atPath: url.path)
        else { return console.say("cannot send \(path): not a readable file") }
        let peers = session.connectedPeers
        guard !peers.isEmpty else { return console.say("nobody is connected yet: /invite a peer from the nearby list") }
        for peer in peers {
            let key = "out \(transferCounter.add(1, ordering: .relaxed).newValue)"
            let label = "\(Terminal.safe(url.lastPathComponent)) > \(Terminal.safe(peer.displayName))"
            board.begin(key, label: label)
            let (session, board) = (session, board)
            Task {
                do throws(MCError) {
                    try await session.sendResource(at: url, named: url.lastPathComponent, to: peer) { sent, total in
                        board.update(key, done: sent, total: total)
                    }
                    board.finish(key, "sent \(label)", succeeded: true)
                } catch {
                    board.finish(key, "failed to send \(label): \(error.reason)", succeeded: false)
                }
            }
        }
    }

    // MARK: Session and discovery

    private func follow(_ events: MCSession.Events) async {
        for await event in events {
            switch event {
            case .peerStateChanged(let peer, .connected):
                let count = members.withLock { members in
                    members.insert(peer)
                    return members.count
                }
                console.say("* \(Terminal.safe(peer.displayName)) joined (\(count) connected)")
            case .peerStateChanged(let peer, .notConnected):
                if members.withLock({ $0.remove(peer) }) != nil { console.say("* \(Terminal.safe(peer.displayName)) left") }
            case .peerStateChanged(let peer, .connecting):
                console.say("connecting to \(Terminal.safe(peer.displayName))...")
            case .dataReceived(let data, let peer):
                console.say("[\(Terminal.safe(peer.displayName))] \(Terminal.safe(String(decoding: data, as: UTF8.self)))")
            case .connectionFailed(let peer, let error), .connectionRefused(let peer, let error):
                console.say("no connection with \(Terminal.safe(peer.displayName)): \(error.reason)")
            case .streamReceived(let reader, let peer):
                reader.cancel()
                console.say("refused a stream from \(Terminal.safe(peer.displayName)): chat takes lines and files")
            case .resourceStarted(let name, let peer, let progress):
                receiving(name, from: peer, progress: progress)
            case .resourceReceived(let name, let peer, let result):
                received(name, from: peer, result: result)
            case .linkInterrupted(let peer):
                console.say("* lost the link to \(Terminal.safe(peer.displayName)); reconnecting (what you send waits for it)")
            case .linkRestored(let peer):
                console.say("* \(Terminal.safe(peer.displayName)) is back")
            case .certificateDecided:
                break
            }
        }
    }

    private func follow(_ snapshots: AsyncStream<MCBrowserModel.Snapshot>) async {
        for await snapshot in snapshots {
            if let changes = nearby.update(snapshot) { console.say(changes) }
        }
    }

    private func receiving(_ name: String, from peer: MCPeerID, progress: Progress) {
        let key = "in \(transferCounter.add(1, ordering: .relaxed).newValue)"
        incoming.withLock { $0[IncomingName(peer: peer, name: name), default: []].append(key) }
        board.begin(key, label: "\(Terminal.safe(name)) < \(Terminal.safe(peer.displayName))")
        board.follow(key, progress, of: session)
    }

    private func received(_ name: String, from peer: MCPeerID, result: Result<URL, MCError>) {
        let key = incoming.withLock { keys -> String in
            let slot = IncomingName(peer: peer, name: name)
            guard let key = keys[slot]?.first else { return "in unknown" }
            keys[slot]?.removeFirst()
            if keys[slot]?.isEmpty == true { keys[slot] = nil }
            return key
        }
        let label = "\(Terminal.safe(name)) from \(Terminal.safe(peer.displayName))"
        switch result {
        case .success(let url):
            let size = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? Int64 ?? 0
            board.update(key, done: size, total: size)
            do {
                let stored = try files.store(url, sentAs: name)
                board.finish(key, "received \(label), saved as \(Terminal.safe(stored.path))", succeeded: true)
            } catch {
                try? FileManager.default.removeItem(at: url)
                board.finish(key, "received \(label) but could not save it: \(error.localizedDescription)", succeeded: false)
            }
        case .failure(let error):
            board.finish(key, "failed to receive \(label): \(error.reason)", succeeded: false)
        }
    }
}
