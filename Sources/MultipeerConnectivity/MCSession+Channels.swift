import Foundation
import NIOCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MultipeerSession
import Synchronization
import MultipeerProtocol

// Streams and resources: Apple's API and the Swift-native one over the engine's channels
// (docs/PROTOCOL.md §7.6, §7.8).
extension MCSession {
    // MARK: Streams

    /// Apple's: opens a stream named `streamName` to a connected peer. Open the returned stream
    /// (and schedule it in a run loop for delegate events) before writing. Throws `MCError`:
    /// `notConnected`, `unavailable` (64 streams and resources already open to the peer) or
    /// `invalidParameter` (a name over 255 bytes).
    public func startStream(withName streamName: String, toPeer peerID: MCPeerID) throws -> OutputStream {
        MCOutputStream(writer: try openWriter(streamName, to: peerID))
    }

    /// Swift-native: a stream to a peer that async code writes to.
    public func openStream(named streamName: String, to peerID: MCPeerID) throws(MCError) -> MCStreamWriter {
        MCStreamWriter(writer: try openWriter(streamName, to: peerID))
    }

    private func openWriter(_ name: String, to peer: MCPeerID) throws(MCError) -> ByteStreamWriter {
        guard let engine else { throw setupError ?? MCError(.unknown) }
        do {
            return try engine.openStream(named: name, to: peer.wire.identifier)
        } catch {
            throw MCError(transfer: error)
        }
    }

    func streamOpened(_ reader: ByteStreamReader) {
        let peer = mcPeer(reader.peer)
        if delegateBox.value != nil {
            delegateQueue.async { [delegateBox, weak self] in
                guard let self, let delegate = delegateBox.value else { return reader.cancel() }
                // Made on the delegate's queue: a stream is not Sendable.
                let stream = MCInputStream(reader: reader)
                delegate.session(self, didReceive: stream, withName: reader.name, fromPeer: peer)
            }
        } else if subscribers.takeChannels {
            emit(.streamReceived(MCStreamReader(reader: reader), from: peer))
        } else {
            reader.cancel()  // nobody to read it: release the writer at once
        }
    }

    // MARK: Resources

    /// Apple's: sends the file at `resourceURL` (a `file:` URL, or `http:`/`https:`, fetched
    /// first) to a connected peer. The returned `Progress` counts bytes; cancelling it stops the
    /// transfer on both sides. `completionHandler` gets nil once the peer has verified and stored
    /// the whole file, or the `MCError` that ended it. Returns nil (and calls the handler with
    /// the error) when the transfer cannot start.
    ///
    /// The handler is Apple's, not `@Sendable`: an app passes whatever closure it holds. So that
    /// it runs where its captures live, it is called, exactly once and never before this returns,
    /// on the actor the caller was isolated to (`isolation`, filled in by the compiler: the main
    /// actor for code on it), or, from code isolated to no actor, on the session's delegate
    /// queue, where delegate calls arrive.
    @discardableResult
    public func sendResource(
        at resourceURL: URL, withName resourceName: String, toPeer peerID: MCPeerID,
        withCompletionHandler completionHandler: (((any Error)?) -> Void)? = nil,
        isolation: isolated (any Actor)? = #isolation
    ) -> Progress? {
        // Unchecked: the handler only ever runs in the caller's isolation, or on the delegate
        // queue when the caller had none (see above).
        let handler = UncheckedBox(completionHandler)
        let caller = isolation
        let queue = delegateQueue
        do {
            let (progress, done) = try startResource(resourceURL, named: resourceName, to: peerID)
            Task {
                let error = await done.value
                await Self.complete(handler, with: error, on: caller, orOn: queue)
            }
            return progress
        } catch {
            Task { await Self.complete(handler, with: error, on: caller, orOn: queue) }
            return nil
        }
    }

    /// Calls an Apple-style completion handler in the isolation it came from, or on `queue`.
    private static func complete(
        _ handler: UncheckedBox<(((any Error)?) -> Void)?>, with error: MCError?, on caller: (any Actor)?, orOn queue: DispatchQueue
    ) async {
        guard let caller else { return queue.async { handler.value?(error) } }
        await call(handler, with: error, isolatedTo: caller)
    }

    private static func call(
        _ handler: UncheckedBox<(((any Error)?) -> Void)?>, with error: MCError?, isolatedTo actor: isolated any Actor
    ) {
        handler.value?(error)
    }

    /// Swift-native: sends a resource and returns once the peer verified and stored it. Cancel
    /// the task to stop the transfer on both sides; `progress` is called with bytes sent.
    public func sendResource(
        at resourceURL: URL, named resourceName: String, to peerID: MCPeerID,
        progress: (@Sendable (_ sent: Int64, _ total: Int64) -> Void)? = nil
    ) async throws(MCError) {
        let (tracker, done) = try startResource(resourceURL, named: resourceName, to: peerID, observer: progress)
        let error = await withTaskCancellationHandler {
            await done.value
        } onCancel: {
            tracker.cancel()
        }
        if let error { throw error }
    }

    private func startResource(
        _ url: URL, named name: String, to peer: MCPeerID, observer: (@Sendable (Int64, Int64) -> Void)? = nil
    ) throws(MCError) -> (Progress, Task<MCError?, Never>) {
        guard let engine else { throw setupError ?? MCError(.unknown) }
        guard url.isFileURL || ["http", "https"].contains(url.scheme?.lowercased() ?? "") else {
            throw MCError(.invalidParameter, reason: "resource URL scheme \(url.scheme ?? "none"): file, http or https")
        }
        guard engine.connectedPeers.contains(where: { $0.identifier == peer.wire.identifier }) else {
            throw MCError(.notConnected, reason: "not connected to \(peer.displayName)")
        }
        let progress = Progress(totalUnitCount: url.isFileURL ? 0 : -1)
        let networkThread = (networkTaskExecutor as! EventLoopTaskExecutor).eventLoop
        let pending = PendingResource()
        progress.cancellationHandler = { pending.cancel() }
        if url.isFileURL {
            let transfer = try send(url.path, named: name, identity: url.absoluteString, to: peer, on: engine)
            pending.started(transfer, progress: progress, observer: observer, on: networkThread)
            return (progress, Task { await pending.outcome() })
        }
        // A remote resource is fetched to a file first, then sent like any other.
        let task = Task<MCError?, Never> { [weak self] in
            let downloaded: URL
            do {
                downloaded = try await Self.download(url)
            } catch {
                return (error as? MCError) ?? MCError(.unavailable, reason: "fetching \(url): \(error)")
            }
            defer { try? FileManager.default.removeItem(at: downloaded) }
            guard let self, !Task.isCancelled else { return MCError(.cancelled, reason: "cancelled while fetching \(url)") }
            do throws(MCError) {
                // Modification time 0: the content is only known by its URL (docs/PROTOCOL.md §7.8).
                let transfer = try send(downloaded.path, named: name, identity: url.absoluteString, modified: 0, to: peer, on: engine)
                pending.started(transfer, progress: progress, observer: observer, on: networkThread)
            } catch {
                return error
            }
            return await pending.outcome()
        }
        pending.fetching(task)
        return (progress, task)
    }

    private func send(
        _ path: String, named name: String, identity: String, modified: Int64? = nil, to peer: MCPeerID, on engine: SessionEngine
    ) throws(MCError) -> ResourceTransfer {
        do {
            return try engine.sendResource(atPath: path, named: name, sourceIdentity: identity, modificationTime: modified, to: peer.wire.identifier)
        } catch {
            throw MCError(transfer: error)
        }
    }

    /// Fetches an http(s) resource into a temporary file of its own; anything but a 2xx is an error.
    private static func download(_ url: URL) async throws -> URL {
        let (location, response) = try await URLSession.shared.download(from: url)
        guard let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status) else {
            try? FileManager.default.removeItem(at: location)
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            throw MCError(.unavailable, reason: "fetching \(url): HTTP status \(status)")
        }
        // URLSession removes its file when this returns: keep ours.
        let kept = FileManager.default.temporaryDirectory.appendingPathComponent("mpcp-fetch-\(UUID().uuidString)")
        try FileManager.default.moveItem(at: location, to: kept)
        return kept
    }

    func resourceStarted(_ transfer: ResourceTransfer) {
        let progress = Progress(totalUnitCount: Int64(clamping: transfer.size))
        progress.completedUnitCount = Int64(clamping: transfer.completedBytes)
        progress.cancellationHandler = { transfer.cancel() }
        // Linux Foundation's Progress takes no lock: it changes on the network thread only, where
        // a task preferring `taskExecutor` can read it without a race.
        let networkThread = (networkTaskExecutor as! EventLoopTaskExecutor).eventLoop
        transfer.setProgressObserver { bytes in networkThread.execute { progress.completedUnitCount = Int64(clamping: bytes) } }
        let peer = mcPeer(transfer.peer)
        emit(.resourceStarted(name: transfer.name, from: peer, progress: progress))
        guard delegateBox.value != nil else { return }
        delegateQueue.async { [delegateBox, weak self] in
            guard let self, let delegate = delegateBox.value else { return }
            delegate.session(self, didStartReceivingResourceWithName: transfer.name, fromPeer: peer, with: progress)
        }
    }

    func resourceFinished(_ transfer: ResourceTransfer, _ result: Result<String, TransferError>) {
        let peer = mcPeer(transfer.peer)
        let mapped = result.map { URL(fileURLWithPath: $0) }.mapError { MCError(transfer: $0) }
        let hasDelegate = delegateBox.value != nil
        let hasSubscribers = subscribers.takeChannels
        emit(.resourceReceived(name: transfer.name, from: peer, result: mapped))
        guard hasDelegate else {
            // Nobody will take the file: do not leave it behind.
            if !hasSubscribers, case .success(let path) = result { try? FileManager.default.removeItem(atPath: path) }
            return
        }
        delegateQueue.async { [delegateBox, weak self] in
            defer {
                // Apple's rule: the file is gone once the delegate returns, unless it was moved.
                if case .success(let path) = result { try? FileManager.default.removeItem(atPath: path) }
            }
            guard let self, let delegate = delegateBox.value else { return }
            switch mapped {
            case .success(let url):
                delegate.session(self, didFinishReceivingResourceWithName: transfer.name, fromPeer: peer, at: url, withError: nil)
            case .failure(let error):
                delegate.session(self, didFinishReceivingResourceWithName: transfer.name, fromPeer: peer, at: nil, withError: error)
            }
        }
    }
}

/// An outgoing resource from the moment the app asked for it: fetching (for a remote URL), then
/// transferring. Cancelling works in either phase.
private final class PendingResource: Sendable {
    private struct State {
        var fetch: Task<MCError?, Never>?
        var transfer: ResourceTransfer?
        var cancelled = false
    }

    private let state = Mutex(State())

    func fetching(_ task: Task<MCError?, Never>) {
        let cancelNow = state.withLock { state -> Bool in
            state.fetch = task
            return state.cancelled
        }
        if cancelNow { task.cancel() }
    }

    /// After its total is set (before the app has it), the Progress changes on `networkThread`
    /// only (Linux Foundation's Progress takes no lock), as an incoming transfer's does; `observer`
    /// is called from wherever the transfer reports.
    func started(
        _ transfer: ResourceTransfer, progress: Progress, observer: (@Sendable (Int64, Int64) -> Void)?, on networkThread: any EventLoop
    ) {
        let total = Int64(clamping: transfer.size)
        progress.totalUnitCount = total
        transfer.setProgressObserver { sent in
            networkThread.execute { progress.completedUnitCount = Int64(clamping: sent) }
            observer?(Int64(clamping: sent), total)
        }
        let cancelNow = state.withLock { state -> Bool in
            state.transfer = transfer
            return state.cancelled
        }
        if cancelNow { transfer.cancel() }
    }

    func cancel() {
        let (fetch, transfer) = state.withLock { state in
            state.cancelled = true
            return (state.fetch, state.transfer)
        }
        fetch?.cancel()
        transfer?.cancel()
    }

    func outcome() async -> MCError? {
        guard let transfer = state.withLock({ $0.transfer }) else { return MCError(.cancelled) }
        switch await transfer.result() {
        case .success: return nil
        case .failure(let error): return MCError(transfer: error)
        }
    }
}
