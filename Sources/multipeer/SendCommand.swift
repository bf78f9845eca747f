import ArgumentParser
import Foundation
import MultipeerConnectivity

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Find a peer by name, invite it, and send it a file.",
        discussion: "For scripts: a progress bar on a terminal, a progress line at every tenth otherwise.\n\nExit status:\n" + AppFailure.table
    )

    @Argument(help: "The file to send.")
    var file: String

    @Option(help: ArgumentHelp("The display name of the peer to send to.", valueName: "name"))
    var to: String

    @Option(help: "Seconds to find the peer, and again for it to answer the invitation.")
    var timeout: Double = 30

    @OptionGroup var peer: PeerOptions

    func validate() throws {
        guard timeout > 0, timeout <= 3_600 else { throw ValidationError("--timeout must be more than 0 and at most 3600 seconds") }
    }

    func run() async throws {
        let console = Console()
        do {
            try await FileSender(options: peer, console: console).send(file, to: to, timeout: timeout)
        } catch {
            console.say("multipeer: \(error.message)")
            throw error.exitCode
        }
    }
}

/// `multipeer send`: one file to one peer, each step's failure its own exit status.
struct FileSender {
    let options: PeerOptions
    let console: Console

    func send(_ path: String, to name: String, timeout: Double) async throws(AppFailure) {
        let url = URL(fileURLWithPath: path)
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        guard attributes?[.type] as? FileAttributeType == .typeRegular, let size = attributes?[.size] as? Int64,
            FileManager.default.isReadableFile(atPath: url.path)
        else { throw AppFailure(.setup, "cannot read \(path): not a readable file") }
        let stopper = Stopper()
        stopper.catchSignals()
        let (session, policy) = try options.makeSession(console: console)
        let answering = console.answerFromInput()
        defer { answering?.cancel() }
        let browser: MCNearbyServiceBrowser
        do {
            browser = try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: options.service, configuration: options.discovery)
        } catch {
            throw AppFailure(.setup, "--service \(options.service): \(error.reason)")
        }
        let found = browser.events()
        let events = session.events()
        do {
            try await browser.start()
        } catch {
            throw AppFailure(.setup, "discovery unavailable: \(error.reason)")
        }
        let work = Task { () async throws -> Void in
            let peer = try await find(name, in: found, timeout: timeout)
            try await invite(peer, browser: browser, session: session, policy: policy, events: events, timeout: timeout)
            await browser.stop()
            try await transfer(url, size: size, to: peer, session: session)
        }
        let interruption = Task {
            if await stopper.wait() == .interrupted { work.cancel() }
        }
        let outcome = await work.result
        interruption.cancel()
        await browser.stop()
        await session.disconnectAndWait()
        if stopper.reason == .interrupted { throw AppFailure(.interrupted, "interrupted") }
        do {
            try outcome.get()
        } catch let failure as AppFailure {
            throw failure
        } catch {
            throw AppFailure(.notConnected, "\(error)")
        }
    }

    private func find(_ name: String, in found: AsyncStream<MCNearbyServiceBrowser.Event>, timeout: Double) async throws(AppFailure) -> MCPeerID {
        console.say("looking for \(Terminal.safe(name))...")
        let peer = await Deadline.run(seconds: timeout) {
            for await event in found {
                if case .found(let peer, _, _) = event, peer.displayName == name { return peer }
            }
            return nil
        }
        guard let peer else { throw AppFailure(.notFound, "no peer named \(Terminal.safe(name)) found within \(Int(timeout)) s") }
        console.say("found \(Terminal.safe(name)); inviting")
        return peer
    }

    private func invite(
        _ peer: MCPeerID, browser: MCNearbyServiceBrowser, session: MCSession, policy: TrustPolicy, events: MCSession.Events,
        timeout: Double
    ) async throws(AppFailure) {
        let name = Terminal.safe(peer.displayName)
        do {
            try await browser.invite(peer, to: session, context: Data("multipeer send".utf8), timeout: timeout)
            return console.say("connected to \(name)")
        } catch let error as MCInvitationError {
            switch error.reason {
            case .declined: throw AppFailure(.declined, "\(name) declined the invitation")
            case .sessionFull: throw AppFailure(.declined, "\(name)'s session is full")
            case .encryptionIncompatible: throw AppFailure(.declined, "\(name) cannot agree on encryption (\(options.encryption.rawValue) here)")
            case .timedOut: throw AppFailure(.notConnected, "\(name) did not answer within \(Int(timeout)) s")
            case .unreachable: throw AppFailure(.notConnected, "\(name) could not be reached: \(error.detail)")
            case .connectionFailed: throw await whyConnectionFailed(peer, policy: policy, events: events)
            }
        } catch {
            throw AppFailure(.notConnected, "inviting \(name) failed: \(error)")
        }
    }

    /// After an accepted invitation, the session said why the connection failed; it is already
    /// among the events, which were subscribed to before the invitation.
    private func whyConnectionFailed(_ peer: MCPeerID, policy: TrustPolicy, events: MCSession.Events) async -> AppFailure {
        let name = Terminal.safe(peer.displayName)
        if policy.wasRejected(peer) { return AppFailure(.untrusted, "you did not trust \(name)") }
        let error = await Deadline.run(seconds: 2) { () -> MCError? in
            for await event in events {
                if case .connectionFailed(peer, let error) = event { return error }
            }
            return nil
        }
        if let error, error.code == .cancelled { return AppFailure(.untrusted, "\(name) did not trust this peer: \(error.reason)") }
        return AppFailure(.notConnected, "the connection to \(name) failed: \(error?.reason ?? "no reason given")")
    }

    private func transfer(_ url: URL, size: Int64, to peer: MCPeerID, session: MCSession) async throws(AppFailure) {
        let board = TransferBoard(console: console)
        let label = "\(Terminal.safe(url.lastPathComponent)) > \(Terminal.safe(peer.displayName))"
        board.begin("out", label: label, total: size)
        do {
            try await session.sendResource(at: url, named: url.lastPathComponent, to: peer) { sent, total in
                board.update("out", done: sent, total: total)
            }
        } catch {
            board.finish("out", "failed to send \(label): \(error.reason)", succeeded: false)
            throw AppFailure(.transferFailed, "the transfer failed: \(error.reason)")
        }
        board.update("out", done: size, total: size)
        board.finish("out", "sent \(label)", succeeded: true)
    }
}
