import Foundation
import MultipeerSession
import Synchronization

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
        } else if subscribers.withLock({ !$0.isEmpty }) {
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
    @discardableResult
    public func sendResource(
        at resourceURL: URL, withName resourceName: String, toPeer peerID: MCPeerID,
        withCompletionHandler completionHandler: (@Sendable ((any Error)?) -> Void)? = nil
    ) -> Progress? {
        do {
            let (progress, done) = try startResource(resourceURL, named: resourceName, to: peerID)
            Task {
                let error = await done.value
                completionHandler?(error)
            }
            return progress
        } catch {
            delegateQueue.async { completionHandler?(error) }
            return nil
        }
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
        guard url.isFileURL else {
            throw MCError(.unsupported, reason: "resource URL scheme \(url.scheme ?? "none"); file URLs are sent directly")
        }
        let transfer: ResourceTransfer
        do {
            transfer = try engine.sendResource(
                atPath: url.path, named: name, sourceIdentity: url.absoluteString, to: peer.wire.identifier)
        } catch {
            throw MCError(transfer: error)
        }
        let progress = Progress(totalUnitCount: Int64(clamping: transfer.size))
        let total = progress.totalUnitCount
        progress.cancellationHandler = { transfer.cancel() }
        transfer.setProgressObserver { sent in
            progress.completedUnitCount = Int64(clamping: sent)
            observer?(Int64(clamping: sent), total)
        }
        let done = Task<MCError?, Never> {
            switch await transfer.result() {
            case .success: nil
            case .failure(let error): MCError(transfer: error)
            }
        }
        return (progress, done)
    }

    func resourceStarted(_ transfer: ResourceTransfer) {
        let progress = Progress(totalUnitCount: Int64(clamping: transfer.size))
        progress.completedUnitCount = Int64(clamping: transfer.completedBytes)
        progress.cancellationHandler = { transfer.cancel() }
        transfer.setProgressObserver { progress.completedUnitCount = Int64(clamping: $0) }
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
        let hasSubscribers = subscribers.withLock { !$0.isEmpty }
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
