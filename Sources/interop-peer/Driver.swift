import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import Synchronization

/// The session, the commands that drive it and the lines that report it (Interop/HARNESS.md).
final class Driver: Sendable {
    private let session: MCSession
    private let out = LineWriter()
    /// With --resource-dir received files stay there; otherwise they are removed once hashed.
    private let keepsResources: Bool
    private let discovery: DiscoveryDriver
    /// Incoming streams still being read, oldest first, for CANCEL-STREAM.
    private let reading = Mutex<[(id: Int, peer: MCPeerID, reader: MCStreamReader)]>([])
    private let nextReading = Atomic(0)

    init(_ options: Options) throws {
        session = try MCSession(
            peer: MCPeerID(validatingDisplayName: options.name), identity: options.identity(),
            encryptionPreference: options.encryption, configuration: options.configuration)
        keepsResources = options.resourceDirectory != nil
        discovery = DiscoveryDriver(session: session, out: out, interface: options.discoveryInterface, listenHost: options.listenAddress)
        // Always an evaluator, even for "accept": the TRUST line must come out before the state
        // change it leads to, which printing from the later certificateDecided event would not ensure.
        let out = out
        let trust = options.trust
        session.setTrustEvaluator { request in
            let accepted: Bool
            switch trust {
            case .accept: accepted = true
            case .reject: accepted = false
            case .authority(let evaluation): accepted = evaluation.evaluate(request.certificates?.map(\.certificate) ?? []).isTrusted
            }
            // The code without its space ("123456"), so that fields stay space-separated.
            let code = request.pairingCode.filter(\.isNumber)
            out.line("TRUST \(Format.peer(request.peer)) \(Format.fingerprint(request.certificates)) \(accepted ? "accepted" : "rejected") \(code)")
            return accepted
        }
    }

    /// Runs until QUIT or the end of input, then exits.
    func run(_ input: AsyncStream<String>) async -> Never {
        // Subscribed before READY, so that no event can come before the stream exists.
        let events = session.events()
        Task { await report(events) }
        out.line("READY \(Format.peer(session.myPeerID))")
        for await line in input {
            let command: Command?
            do {
                command = try Command.parse(line.hasSuffix("\r") ? String(line.dropLast()) : line)
            } catch {
                out.line("ERROR \(error.word) usage")
                continue
            }
            guard let command else { continue }
            if case .quit = command { break }
            await perform(command)
        }
        await session.disconnectAndWait()
        out.finish("BYE")
        exit(0)
    }

    // MARK: Commands

    /// Runs one command. Those that answer at once are awaited, so that SENDs go out in input
    /// order; STREAM and RESOURCE run on, answering with their name when done.
    private func perform(_ command: Command) async {
        switch command {
        case .makeData(let peer):
            do {
                let data = try await session.nearbyConnectionData(forPeer: peer)
                out.line("DATA \(Format.peer(peer)) \(Format.hex(data))")
            } catch {
                out.line("ERROR MAKE-DATA \(Format.reason(error))")
            }
        case .connect(let peer, let data):
            // The throwing form: connection data the library refuses is an answer, not a state change.
            do {
                try session.connect(to: peer, nearbyConnectionData: data)
                out.line("OK CONNECT")
            } catch {
                out.line("ERROR CONNECT \(Format.reason(error))")
            }
        case .send(let mode, let peer, let payload):
            let data: Data
            switch payload {
            case .bytes(let bytes): data = bytes
            case .file(let path):
                guard let contents = FileManager.default.contents(atPath: path) else { return out.line("ERROR SEND unreadable") }
                data = contents
            }
            do {
                // The async send waits while the peer's queue is full instead of failing.
                try await session.send(data, to: [peer], mode: mode)
                out.line("OK SEND")
            } catch {
                out.line("ERROR SEND \(Format.reason(error))")
            }
        case .stream(let peer, let name, let path):
            guard let file = FileHandle(forReadingAtPath: path) else { return out.line("ERROR STREAM unreadable") }
            Task { await sendStream(from: file, named: name, to: peer) }
        case .resource(let peer, let name, let path):
            guard FileManager.default.isReadableFile(atPath: path) else { return out.line("ERROR RESOURCE unreadable") }
            Task {
                do {
                    try await session.sendResource(at: URL(fileURLWithPath: path), named: name, to: peer)
                    out.line("RESOURCE-SENT \(Format.name(name)) ok")
                } catch {
                    out.line("RESOURCE-SENT \(Format.name(name)) failed \(Format.reason(error))")
                }
            }
        case .cancel(let peer):
            session.cancelConnectPeer(peer)
            out.line("OK CANCEL")
        case .cancelStream(let peer, let name):
            let reader = reading.withLock { $0.first { $0.peer == peer && $0.reader.name == name }?.reader }
            guard let reader else { return out.line("ERROR CANCEL-STREAM invalidParameter") }
            // Its reading task prints STREAM-FAILED ... cancelled.
            reader.cancel()
            out.line("OK CANCEL-STREAM")
        case .peers:
            out.line((["PEERS"] + session.connectedPeers.map(Format.peer)).joined(separator: " "))
        case .advertise(let service): await discovery.advertise(service)
        case .stopAdvertising: await discovery.stopAdvertising()
        case .browse(let service): await discovery.browse(service)
        case .stopBrowsing: await discovery.stopBrowsing()
        case .invite(let peer, let timeout, let context): discovery.invite(peer, timeout: timeout, context: context)
        case .answer(let number, let accept): discovery.answer(number, accept: accept)
        case .disconnect:
            await session.disconnectAndWait()
            out.line("OK DISCONNECT")
        case .quit:
            break  // handled by the input loop
        }
    }

    private func sendStream(from file: FileHandle, named name: String, to peer: MCPeerID) async {
        defer { try? file.close() }
        let writer: MCStreamWriter
        do {
            writer = try session.openStream(named: name, to: peer)
        } catch {
            return out.line("STREAM-SENT \(Format.name(name)) failed \(Format.reason(error))")
        }
        do {
            while let chunk = try readChunk(file) {
                try await writer.write(chunk)
            }
        } catch let error as MCError {
            return out.line("STREAM-SENT \(Format.name(name)) failed \(Format.transferReason(error))")
        } catch {
            writer.cancel()  // the file failed, not the stream: the reader must not take it as complete
            return out.line("STREAM-SENT \(Format.name(name)) failed unreadable")
        }
        do {
            // Returns once everything went to the connection: a reader's refusal before then fails it.
            try await writer.finish()
        } catch {
            return out.line("STREAM-SENT \(Format.name(name)) failed \(Format.transferReason(error))")
        }
        out.line("STREAM-SENT \(Format.name(name)) ok")
    }

    /// The next piece of the file, nil at its end.
    private func readChunk(_ file: FileHandle) throws -> Data? {
        guard let chunk = try file.read(upToCount: 64 << 10), !chunk.isEmpty else { return nil }
        return chunk
    }

    // MARK: Events

    private func report(_ events: MCSession.Events) async {
        for await event in events {
            switch event {
            case .peerStateChanged(let peer, let state):
                out.line("STATE \(Format.peer(peer)) \(state)")
            case .dataReceived(let data, let peer):
                let payload = data.count <= 1024 ? Format.hex(data) : "-"
                out.line("RECEIVED \(Format.peer(peer)) \(Digest.of(data)) \(payload)")
            case .streamReceived(let reader, let peer):
                Task { await receiveStream(reader, from: peer) }
            case .resourceStarted(let name, let peer, _):
                out.line("RESOURCE-STARTED \(Format.peer(peer)) \(Format.name(name))")
            case .resourceReceived(let name, let peer, let result):
                // Hashed off this loop: a large file must not hold up the events behind it.
                Task { receivedResource(name, from: peer, result) }
            case .certificateDecided, .connectionFailed, .connectionRefused, .linkInterrupted, .linkRestored:
                break  // TRUST is printed by the evaluator; the others have no line
            }
        }
    }

    private func receiveStream(_ reader: MCStreamReader, from peer: MCPeerID) async {
        let prefix = "\(Format.peer(peer)) \(Format.name(reader.name))"
        let id = nextReading.add(1, ordering: .relaxed).newValue
        reading.withLock { $0.append((id, peer, reader)) }
        defer { reading.withLock { $0.removeAll { $0.id == id } } }
        var digest = Digest()
        do {
            for try await chunk in reader { digest.update(chunk) }
            out.line("STREAM \(prefix) \(digest.finish())")
        } catch {
            out.line("STREAM-FAILED \(prefix) \(Format.transferReason(error))")
        }
    }

    private func receivedResource(_ name: String, from peer: MCPeerID, _ result: Result<URL, MCError>) {
        let prefix = "\(Format.peer(peer)) \(Format.name(name))"
        switch result {
        case .success(let url):
            // Without a delegate the file is ours: keep it only where we were asked to.
            defer { if !keepsResources { try? FileManager.default.removeItem(at: url) } }
            do {
                out.line("RESOURCE \(prefix) \(try Digest.of(file: url.path))")
            } catch {
                out.line("RESOURCE-FAILED \(prefix) unreadable")
            }
        case .failure(let error):
            out.line("RESOURCE-FAILED \(prefix) \(Format.transferReason(error))")
        }
    }
}
