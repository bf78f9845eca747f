import ArgumentParser
import Foundation
import MultipeerConnectivity

struct ReceiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receive",
        abstract: "Advertise, accept invitations, and save the files peers send.",
        discussion: """
            For scripts: accepts every invitation; whether the sender may connect is the trust \
            options' decision (--trust-ca, --trust-any, or asking on a terminal). Exits once \
            --count files have arrived.

            Exit status:
            """ + "\n" + AppFailure.table
    )

    @Option(help: ArgumentHelp("Where received files are saved.", valueName: "directory"))
    var dir: String = "."

    @Option(help: "How many files to receive before exiting.")
    var count: Int = 1

    @Option(help: "Seconds to wait for the files; 0 waits for ever.")
    var timeout: Double = 0

    @OptionGroup var peer: PeerOptions

    func validate() throws {
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        guard timeout >= 0, timeout <= 86_400 else { throw ValidationError("--timeout must be between 0 and 86400 seconds") }
    }

    func run() async throws {
        let console = Console()
        do {
            try await FileReceiver(options: peer, console: console, files: try ReceivedFiles(path: dir)).receive(count: count, timeout: timeout)
        } catch {
            console.say("multipeer: \(error.message)")
            throw error.exitCode
        }
    }
}

/// `multipeer receive`: advertises until `count` files arrived, one failed, or time ran out.
struct FileReceiver {
    let options: PeerOptions
    let console: Console
    let files: ReceivedFiles

    func receive(count: Int, timeout: Double) async throws(AppFailure) {
        let stopper = Stopper()
        stopper.catchSignals()
        let (session, policy) = try options.makeSession(console: console)
        let answeringQuestions = console.answerFromInput()
        defer { answeringQuestions?.cancel() }
        let advertiser: MCNearbyServiceAdvertiser
        do {
            advertiser = try MCNearbyServiceAdvertiser(
                peer: session.myPeerID, discoveryInfo: ["app": "multipeer"], serviceType: options.service, configuration: options.discovery,
                listenHost: PeerOptions.listenHost)
        } catch {
            throw AppFailure(.setup, "--service \(options.service): \(error.reason)")
        }
        let invitations = advertiser.invitations()
        let events = session.events()
        do {
            try await advertiser.start()
        } catch {
            throw AppFailure(.setup, "discovery unavailable: \(error.reason)")
        }
        console.say("waiting for files as \(Terminal.safe(session.myPeerID.displayName)) (service \(options.service)), saving to \(files.directory.path)")
        let console = console
        let answering = Task {
            for await invitation in invitations {
                console.say("\(Terminal.safe(invitation.peer.displayName)) invites: accepting")
                invitation.accept(into: session)
            }
        }
        let work = Task { () async -> AppFailure? in
            await take(events, count: count, from: session, policy: policy)
        }
        let limit = Task {
            if timeout > 0 { try await Task.sleep(for: .seconds(timeout)) } else { try await Task.sleep(for: .seconds(86_400 * 365)) }
            stopper.request(.quit)
        }
        let watcher = Task {
            _ = await stopper.wait()
            work.cancel()
        }
        let failure = await work.value
        answering.cancel()
        limit.cancel()
        watcher.cancel()
        await advertiser.stop()
        await session.disconnectAndWait()
        if stopper.reason == .interrupted { throw AppFailure(.interrupted, "interrupted") }
        if let failure { throw failure }
    }

    /// Takes events until `count` files are stored; the failure that ended it otherwise.
    private func take(_ events: MCSession.Events, count: Int, from session: MCSession, policy: TrustPolicy) async -> AppFailure? {
        let board = TransferBoard(console: console)
        var stored = 0
        var distrusted: String?
        for await event in events {
            switch event {
            case .resourceStarted(let name, let peer, let progress):
                let label = "\(Terminal.safe(name)) < \(Terminal.safe(peer.displayName))"
                board.begin(label, label: label)
                board.follow(label, progress, of: session)
            case .resourceReceived(let name, let peer, .success(let url)):
                let label = "\(Terminal.safe(name)) < \(Terminal.safe(peer.displayName))"
                do {
                    let size = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? Int64 ?? 0
                    let path = try files.store(url, sentAs: name)
                    board.update(label, done: size, total: size)
                    board.finish(label, "received \(Terminal.safe(name)) from \(Terminal.safe(peer.displayName)), saved as \(Terminal.safe(path.path))", succeeded: true)
                } catch {
                    try? FileManager.default.removeItem(at: url)
                    board.finish(label, "could not save \(Terminal.safe(name))", succeeded: false)
                    return AppFailure(.transferFailed, "could not save \(Terminal.safe(name)): \(error.localizedDescription)")
                }
                stored += 1
                if stored == count { return nil }
            case .resourceReceived(let name, let peer, .failure(let error)):
                let label = "\(Terminal.safe(name)) < \(Terminal.safe(peer.displayName))"
                board.finish(label, "failed to receive \(label): \(error.reason)", succeeded: false)
                return AppFailure(.transferFailed, "receiving \(Terminal.safe(name)) from \(Terminal.safe(peer.displayName)) failed: \(error.reason)")
            case .connectionFailed(let peer, let error):
                let name = Terminal.safe(peer.displayName)
                if policy.wasRejected(peer) {
                    distrusted = "you did not trust \(name)"
                } else if error.code == .cancelled {
                    distrusted = "\(name) did not trust this peer"
                }
                console.say("no connection with \(name): \(error.reason)")
            case .streamReceived(let reader, let peer):
                reader.cancel()
                console.say("refused a stream from \(Terminal.safe(peer.displayName)): receive takes files")
            case .peerStateChanged(let peer, .connected):
                console.say("connected to \(Terminal.safe(peer.displayName))")
            case .linkInterrupted(let peer):
                console.say("lost the link to \(Terminal.safe(peer.displayName)); reconnecting")
            case .linkRestored(let peer):
                console.say("\(Terminal.safe(peer.displayName)) is back")
            case .peerStateChanged, .dataReceived, .certificateDecided, .connectionRefused:
                break
            }
        }
        // The events ended: the time ran out (or an interruption, which the caller reports).
        if let distrusted { return AppFailure(.untrusted, distrusted) }
        return AppFailure(.notFound, stored == 0 ? "no file arrived in time" : "only \(stored) of \(count) files arrived in time")
    }
}
