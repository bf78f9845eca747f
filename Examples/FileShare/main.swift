// file-share: one peer sends a file to the peers that receive, with `sendResource`, and watches
// the `Progress` it returns; each receiver moves the file out of the session's folder and checks
// it against the size and checksum the sender announced.
//
//   file-share receive --service mpc-files --name bob --output DIR [--timeout 60]
//   file-share send --service mpc-files --name alice --file PATH [--as NAME] [--receivers 1] [--timeout 60]
//
// Receivers advertise; the sender browses and invites them. Prints `CONNECTED <name>`,
// `PROGRESS <name> <fraction>`, `SENT <name>` and `CONFIRMED <name>` (sender), `RECEIVING <file>`,
// `VERIFIED <file> <size> <checksum>` (receiver), then `DONE`; exits 0 on success, 1 on a
// failure and 2 at the time limit.
import MultipeerConnectivity

/// What goes over the wire besides the file itself, as JSON.
enum ShareMessage: Codable {
    /// Sent before the file: what the receiver must end up with.
    case offer(name: String, size: Int, checksum: String)
    /// The receiver's answer once the file is in place.
    case received(name: String, size: Int, checksum: String)
}

enum Role: String {
    case send, receive
}

struct Options {
    var role: Role
    var serviceType = "mpc-files"
    var displayName = ProcessInfo.processInfo.hostName
    var file: URL?
    /// The name the receivers are told, instead of the file's own.
    var sendAs: String?
    var output: URL?
    var receivers = 1
    var timeout: Double = 60

    static func parse(_ arguments: [String]) -> Options {
        var rest = arguments[...]
        guard let role = rest.popFirst().flatMap(Role.init(rawValue:)) else { usage("send or receive?") }
        var options = Options(role: role)
        func value(_ flag: String) -> String {
            guard let value = rest.popFirst() else { usage("\(flag) needs a value") }
            return value
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--service": options.serviceType = value(flag)
            case "--name": options.displayName = value(flag)
            case "--file": options.file = URL(fileURLWithPath: value(flag))
            case "--as": options.sendAs = value(flag)
            case "--output": options.output = URL(fileURLWithPath: value(flag), isDirectory: true)
            case "--receivers": options.receivers = Int(value(flag)) ?? 0
            case "--timeout": options.timeout = Double(value(flag)) ?? 0
            default: usage("unknown argument \(flag)")
            }
        }
        switch role {
        case .send: guard options.file != nil, options.receivers >= 1 else { usage("send needs --file") }
        case .receive: guard options.output != nil else { usage("receive needs --output") }
        }
        guard options.timeout > 0 else { usage("bad timeout") }
        return options
    }

    static func usage(_ problem: String) -> Never {
        print("file-share: \(problem)")
        print("usage: file-share send --file PATH [--receivers N] | receive --output DIR; both: [--service TYPE] [--name NAME] [--timeout SECONDS]")
        exit(64)
    }
}

/// Prints a line at once, even into a pipe (where `print` would hold it in a buffer).
/// One output line; what peers chose in it goes through `shown` first.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((shown(line) + "\n").utf8))
}

/// Text a peer chose (its name, a file's name), fit for one output line: control characters,
/// a newline among them, would let a peer forge lines or drive the terminal.
func shown(_ text: String) -> String {
    String(String.UnicodeScalarView(text.unicodeScalars.map { CharacterSet.controlCharacters.contains($0) ? "?" : $0 }))
}

/// A peer's name for a file, as a plain name in the output folder: its last path component,
/// without leading dots (so never "." or "..", never hidden) or control characters.
func safeFileName(_ proposed: String) -> String {
    var name = String(proposed.split(separator: "/").last ?? "")
    name = String(String.UnicodeScalarView(name.unicodeScalars.filter { !CharacterSet.controlCharacters.contains($0) }))
    while name.hasPrefix(".") { name.removeFirst() }
    return name.isEmpty ? "received" : name
}

/// Where a received file goes: `name`, or `name-2`, `name-3`, ... when that is taken. Nothing
/// already in the folder is replaced or removed on a peer's word.
func freeDestination(for name: String, in folder: URL) -> URL {
    var candidate = folder.appendingPathComponent(name)
    var number = 2
    while FileManager.default.fileExists(atPath: candidate.path) {
        candidate = folder.appendingPathComponent("\(name)-\(number)")
        number += 1
    }
    return candidate
}

/// Size and 64-bit FNV-1a of a file's bytes, as hex: enough to tell a damaged copy.
func fingerprint(of url: URL) throws -> (size: Int, checksum: String) {
    let data = try Data(contentsOf: url)
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    data.withUnsafeBytes { bytes in
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
    }
    return (data.count, String(hash, radix: 16))
}

@MainActor
final class FileShare: NSObject {
    let options: Options
    let myPeerID: MCPeerID
    let session: MCSession
    private var advertiser: MCNearbyServiceAdvertiser?
    private var browser: MCNearbyServiceBrowser?
    private let encoder = JSONEncoder()
    private let decoder = JSONDecoder()
    private var connected: Set<MCPeerID> = []

    // Sending
    private var fileFingerprint: (size: Int, checksum: String)?
    private var sending = false
    private var watchers: [MCPeerID: Task<Void, Never>] = [:]
    private var sent: Set<MCPeerID> = []
    private var confirmed: Set<MCPeerID> = []

    // Receiving
    private var offers: [String: (size: Int, checksum: String)] = [:]
    private var arrived: [String: (size: Int, checksum: String)] = [:]
    private var verified = false
    private var leaving = false

    init(options: Options) {
        self.options = options
        myPeerID = MCPeerID(displayName: options.displayName)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        super.init()
        session.delegate = self
    }

    func start() {
        switch options.role {
        case .send:
            do {
                fileFingerprint = try fingerprint(of: options.file!)
            } catch {
                fail("cannot read \(options.file!.path): \(error)")
            }
            let browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: options.serviceType)
            browser.delegate = self
            browser.startBrowsingForPeers()
            self.browser = browser
        case .receive:
            try? FileManager.default.createDirectory(at: options.output!, withIntermediateDirectories: true)
            let advertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: ["role": "receiver"], serviceType: options.serviceType)
            advertiser.delegate = self
            advertiser.startAdvertisingPeer()
            self.advertiser = advertiser
        }
        say("STARTED \(myPeerID.displayName) \(options.role.rawValue)")
    }

    private func send(_ message: ShareMessage, to peer: MCPeerID) {
        do {
            try session.send(try encoder.encode(message), toPeers: [peer], with: .reliable)
        } catch {
            fail("cannot send to \(peer.displayName): \(error)")
        }
    }

    // MARK: The sender

    private func sendFileIfEveryoneIsHere() {
        guard options.role == .send, !sending, connected.count == options.receivers, let fileFingerprint, let file = options.file else { return }
        sending = true
        browser?.stopBrowsingForPeers()
        let name = options.sendAs ?? file.lastPathComponent
        for peer in connected {
            send(.offer(name: name, size: fileFingerprint.size, checksum: fileFingerprint.checksum), to: peer)
            let progress = session.sendResource(at: file, withName: name, toPeer: peer) { error in
                // Runs on the main actor: that is where sendResource was called.
                self.finishedSending(to: peer, error: error)
            }
            guard let progress else { return fail("could not start sending to \(peer.displayName)") }
            watchers[peer] = watch(progress, of: peer)
        }
    }

    /// No key-value observing of `Progress` on Linux: read `fractionCompleted` now and then, on
    /// the session's network thread, where it changes.
    private func watch(_ progress: Progress, of peer: MCPeerID) -> Task<Void, Never> {
        Task(executorPreference: session.taskExecutor) {
            var last = -1.0
            while true {
                let fraction = progress.fractionCompleted
                if fraction != last {
                    last = fraction
                    say("PROGRESS \(shown(peer.displayName)) \(String(format: "%.3f", fraction))")
                }
                if Task.isCancelled { return }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    private func finishedSending(to peer: MCPeerID, error: (any Error)?) {
        if let error { return fail("sending to \(peer.displayName) failed: \(error)") }
        // The watcher reads the final fraction once more, then stops.
        watchers[peer]?.cancel()
        sent.insert(peer)
        say("SENT \(shown(peer.displayName))")
        checkSenderFinished()
    }

    private func confirm(_ name: String, size: Int, checksum: String, from peer: MCPeerID) {
        guard let fileFingerprint, size == fileFingerprint.size, checksum == fileFingerprint.checksum else {
            return fail("\(peer.displayName) received \(name) as \(size) bytes, checksum \(checksum)")
        }
        confirmed.insert(peer)
        say("CONFIRMED \(shown(peer.displayName)) \(size) \(checksum)")
        checkSenderFinished()
    }

    private func checkSenderFinished() {
        guard sent.count == options.receivers, confirmed.count == options.receivers, !leaving else { return }
        leaving = true
        Task {
            // Let the watchers print their last line.
            for watcher in watchers.values { await watcher.value }
            say("DONE")
            session.disconnect()
            DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { exit(0) }
        }
    }

    // MARK: A receiver

    /// The file is in the output folder (the delegate moved it there); check it once the offer is here too.
    fileprivate func arrived(_ name: String, size: Int, checksum: String, from peer: MCPeerID) {
        arrived[name] = (size, checksum)
        checkReceived(name, from: peer)
    }

    private func checkReceived(_ name: String, from peer: MCPeerID) {
        guard let offer = offers[name], let copy = arrived[name] else { return }
        guard offer == copy else { return fail("\(name): \(copy.size) bytes, checksum \(copy.checksum); offered \(offer.size), \(offer.checksum)") }
        verified = true
        say("VERIFIED \(shown(name)) \(copy.size) \(copy.checksum)")
        send(.received(name: name, size: copy.size, checksum: copy.checksum), to: peer)
        // The sender hangs up once every receiver has answered.
    }

    // MARK: Events, on the main queue

    fileprivate func peer(_ peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected:
            connected.insert(peerID)
            say("CONNECTED \(shown(peerID.displayName))")
            sendFileIfEveryoneIsHere()
        case .notConnected:
            let was = connected.remove(peerID) != nil
            if was { say("DISCONNECTED \(shown(peerID.displayName))") }
            switch options.role {
            case .receive where leaving:
                break
            case .receive where verified:
                leaving = true
                say("DONE")
                advertiser?.stopAdvertisingPeer()
                DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { exit(0) }
            case .receive:
                if was { fail("\(peerID.displayName) left before the file was here") }
            case .send where sending:
                if !confirmed.contains(peerID) { fail("\(peerID.displayName) left before it had the file") }
            case .send:
                // A declined or timed-out invitation: try again.
                DispatchQueue.main.asyncAfter(deadline: .now() + 1) { self.invite(peerID) }
            }
        case .connecting:
            break
        @unknown default:
            break
        }
    }

    fileprivate func receive(_ data: Data, from peerID: MCPeerID) {
        guard let message = try? decoder.decode(ShareMessage.self, from: data) else { return fail("undecodable message from \(peerID.displayName)") }
        switch message {
        case .offer(let name, let size, let checksum):
            say("OFFERED \(shown(name)) \(size) \(checksum)")
            offers[name] = (size, checksum)
            checkReceived(name, from: peerID)
        case .received(let name, let size, let checksum):
            confirm(name, size: size, checksum: checksum, from: peerID)
        }
    }

    fileprivate func invite(_ peerID: MCPeerID) {
        guard !sending, !connected.contains(peerID) else { return }
        browser?.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
    }

    func fail(_ reason: String) {
        say("FAIL \(shown(reason))")
        exit(1)
    }

    func timedOut() {
        say("TIMEOUT connected=\(connected.map { shown($0.displayName) }.sorted().joined(separator: ",")) sent=\(sent.count) confirmed=\(confirmed.count)")
        exit(2)
    }
}

extension FileShare: MCSessionDelegate {
    nonisolated func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        DispatchQueue.main.async { self.peer(peerID, didChange: state) }
    }

    nonisolated func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        DispatchQueue.main.async { self.receive(data, from: peerID) }
    }

    nonisolated func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}

    nonisolated func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress
    ) {
        say("RECEIVING \(shown(resourceName)) from \(shown(peerID.displayName))")
    }

    /// The session deletes the file when this returns: move it first, here.
    nonisolated func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?,
        withError error: (any Error)?
    ) {
        guard let localURL, error == nil else {
            let reason = "receiving \(resourceName) failed: \(error.map { "\($0)" } ?? "no file")"
            DispatchQueue.main.async { self.fail(reason) }
            return
        }
        // Only a name from the peer, never a path, and never over a file already there.
        let destination = freeDestination(for: safeFileName(resourceName), in: options.output!)
        do {
            try FileManager.default.moveItem(at: localURL, to: destination)
            say("STORED \(shown(destination.lastPathComponent))")
            let (size, checksum) = try fingerprint(of: destination)
            DispatchQueue.main.async { self.arrived(resourceName, size: size, checksum: checksum, from: peerID) }
        } catch {
            let reason = "cannot keep \(resourceName): \(error)"
            DispatchQueue.main.async { self.fail(reason) }
        }
    }
}

extension FileShare: MCNearbyServiceAdvertiserDelegate {
    nonisolated func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, session)
    }

    nonisolated func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        DispatchQueue.main.async { self.fail("cannot advertise: \(error)") }
    }
}

extension FileShare: MCNearbyServiceBrowserDelegate {
    nonisolated func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {
        guard info?["role"] == "receiver" else { return }
        DispatchQueue.main.async {
            say("FOUND \(shown(peerID.displayName))")
            self.invite(peerID)
        }
    }

    nonisolated func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}

    nonisolated func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        DispatchQueue.main.async { self.fail("cannot browse: \(error)") }
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let share = FileShare(options: options)
share.start()
DispatchQueue.main.asyncAfter(deadline: .now() + options.timeout) { share.timedOut() }
dispatchMain()
