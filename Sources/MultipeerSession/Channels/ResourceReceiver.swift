import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// Receives one resource into a file of the session's own naming (docs/PROTOCOL.md §7.8): writes
/// chunks in order on a thread pool, gives window back as they reach the file, checks the size
/// and the SHA-256 of the whole content at RESOURCE_COMPLETE, then answers RESOURCE_RECEIVED or
/// RESOURCE_CANCEL. A failed or cancelled transfer leaves no file; one cut off by a lost
/// connection is handed to `keepPartial` for resuming, with the hash state of what it wrote, so
/// a resume continues hashing where this one stopped and never reads the prefix back.
///
/// The outcome is claimed under the lock before any final frame goes out, so a cancel racing
/// the verification cannot tell the sender one thing and do another.
package final class ResourceReceiver: InboundChannel {
    /// Chunks are written in batches of about this much.
    static let writeBatch = 256 * 1024

    private struct State {
        var pending = ChunkQueue()
        var writeInFlight = false
        /// File length written so far (includes a resumed prefix).
        var written: UInt64
        var expectedDigest: SHA256Digest?
        var result: Result<String, TransferError>?
        /// The connection was lost while a write ran: keep the partial once it lands, then report.
        var failedWhileWriting: TransferError?
        /// Cut off from a member that recovers: the partial is kept, and nothing is reported
        /// (the transfer continues when the sender offers it again).
        var interrupted = false
        /// Every byte is written and the check of the whole file has begun (or ended).
        var verifying = false
        /// The outcome is taken and its partial, if any, is kept: nothing of this receiver runs
        /// any more. Then `whenSettled`'s closures run.
        var settled = false
        var settledWaiters: [@Sendable () -> Void] = []

        /// Sets the outcome; bytes still queued are dropped, and their count is returned so their
        /// window can go back to the peer.
        mutating func takeOutcome(_ outcome: Result<String, TransferError>) -> Int {
            result = outcome
            return pending.removeAll()
        }
    }

    let channel: UInt32
    let offer: ResourceOffer
    let peer: WirePeerID
    let path: String
    let startOffset: UInt64
    private let file: OpenFile
    private let pool: NIOThreadPool
    private let eventLoop: any EventLoop
    private let linkage: any ChannelLinkage
    /// The kept partial this transfer resumed, if any.
    private let resumed: ResumeStore.Partial?
    /// Takes a partial cut off by a lost connection (and the one it resumed); without it the file goes.
    private let keepPartial: (@Sendable (ResumeStore.Partial, _ resumed: ResumeStore.Partial?) -> Void)?
    /// Fed in file order on the pool, one task at a time, with exactly the bytes written.
    private let hasher: SHA256Hasher
    private let state: Mutex<State>
    private let onProgress: @Sendable (UInt64) -> Void
    private let onCompletion: @Sendable (Result<String, TransferError>) -> Void
    /// A test's way to make the store fail: called before each write and before the final sync.
    private let writeFault: (@Sendable (UInt64) throws -> Void)?

    /// `resumed`: a kept partial of this transfer, whose file `file` is, cut to its length.
    package init(
        channel: UInt32, offer: ResourceOffer, peer: WirePeerID, path: String, file: OpenFile, resumed: ResumeStore.Partial?,
        pool: NIOThreadPool, eventLoop: any EventLoop, linkage: any ChannelLinkage,
        keepPartial: (@Sendable (ResumeStore.Partial, _ resumed: ResumeStore.Partial?) -> Void)?,
        writeFault: (@Sendable (UInt64) throws -> Void)?,
        onProgress: @escaping @Sendable (UInt64) -> Void, onCompletion: @escaping @Sendable (Result<String, TransferError>) -> Void
    ) {
        self.channel = channel
        self.offer = offer
        self.peer = peer
        self.path = path
        self.file = file
        self.resumed = resumed
        startOffset = resumed?.length ?? 0
        hasher = resumed?.hashState ?? SHA256Hasher()
        self.pool = pool
        self.eventLoop = eventLoop
        self.linkage = linkage
        self.keepPartial = keepPartial
        self.writeFault = writeFault
        self.onProgress = onProgress
        self.onCompletion = onCompletion
        state = Mutex(State(written: startOffset))
    }

    /// The digest RESOURCE_COMPLETE gave, once every byte is written and the whole file is
    /// being checked against it (or was): nil before.
    package var verifyingDigest: SHA256Digest? { state.withLock { $0.verifying ? $0.expectedDigest : nil } }
    /// The digest RESOURCE_COMPLETE named, once it came: what a verdict was reached on.
    package var announcedDigest: SHA256Digest? { state.withLock { $0.expectedDigest } }

    /// Whether RESOURCE_COMPLETE has arrived (so every byte has, though some may not be written yet).
    package var completeArrived: Bool { state.withLock { $0.expectedDigest != nil } }

    /// Whether a write (or the final check) runs on the pool now, or chunks wait for one.
    package var isBusy: Bool { state.withLock { $0.writeInFlight || !$0.pending.isEmpty } }

    /// Runs `body` once the receiver has ended and kept its partial, if any (at once if it has).
    package func whenSettled(_ body: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if !state.settled { state.settledWaiters.append(body) }
            return state.settled
        }
        if now { body() }
    }

    /// The application gave up (RESOURCE_CANCEL 1); the file is removed.
    package func cancel() {
        guard claim(.failure(TransferError(.cancelled))) else { return }
        linkage.channelSend(.resourceCancel(channel: channel, reason: .cancelled))
        report(removeFile: true)
    }

    // MARK: On the loop

    package func peerSent(_ frame: Frame) {
        switch frame {
        case .resourceChunk(_, let data):
            let accepted = state.withLock { state -> Bool in
                guard state.result == nil, state.failedWhileWriting == nil else { return false }
                state.pending.append(data)
                return true
            }
            if accepted { writeMore() } else { linkage.channelTaken(data.readableBytes, on: channel) }
        case .resourceComplete(_, let digest):
            state.withLock { $0.expectedDigest = digest }
            verifyIfDone()
        case .resourceCancel(_, let reason):
            if claim(.failure(TransferError.fromPeerCancel(reason))) { report(removeFile: true) }
        case .streamReset(_, let code):
            if claim(.failure(TransferError.fromPeerReset(code))) { report(removeFile: true) }
        default:
            break
        }
    }

    package func failed(_ error: TransferError) {
        cutOff(error, interrupted: false)
    }

    /// The connection was lost but the member recovers: the partial is kept as after `failed`,
    /// and the loss is not reported; the same transfer resumes from it when offered again.
    /// False when the transfer had ended (or was being verified: that outcome still counts).
    package func interrupt() -> Bool {
        cutOff(TransferError(.connectionLost), interrupted: true)
    }

    @discardableResult
    private func cutOff(_ error: TransferError, interrupted: Bool) -> Bool {
        // Cut off: keep what reached the file, for the same sender to resume. The outcome is
        // reported once the partial is kept, so a resend right after finds it. Safe from any
        // thread (the engine calls it on the loop): deciding and claiming share one lock, so no
        // write can start in between and land past the length recorded for the partial.
        let (live, keepNow, dropped) = state.withLock { state -> (Bool, Bool, Int) in
            guard state.result == nil, state.failedWhileWriting == nil, !(interrupted && state.verifying) else {
                return (false, false, 0)
            }
            state.interrupted = interrupted
            if state.writeInFlight {
                state.failedWhileWriting = error
                return (true, false, 0)
            }
            return (true, true, state.takeOutcome(.failure(error)))
        }
        if dropped > 0 { linkage.channelTaken(dropped, on: channel) }
        if keepNow { keepPartialAndReport() }
        return live
    }

    /// After a write that the connection's loss waited for.
    private func keepPartialAndReport(_ error: TransferError) {
        guard claim(.failure(error)) else { return }
        keepPartialAndReport()
    }

    /// The outcome is claimed and no write runs or can start: the file's length and the hash
    /// state are final, and match. A state OpenSSL cannot copy loses the partial rather than
    /// costing a re-read later.
    private func keepPartialAndReport() {
        let written = state.withLock { $0.written }
        if let keepPartial, let hashState = hasher.copy() {
            keepPartial(ResumeStore.Partial(path: path, length: written, hashState: hashState), resumed)
        } else {
            FileNames.remove(path)
        }
        report(removeFile: false)
    }

    private func writeMore() {
        let batch = state.withLock { state -> (chunks: [ByteBuffer], at: UInt64)? in
            guard state.result == nil, state.failedWhileWriting == nil, !state.writeInFlight, !state.pending.isEmpty else { return nil }
            var chunks: [ByteBuffer] = []
            var bytes = 0
            while bytes < Self.writeBatch, let chunk = state.pending.popFirst() {
                chunks.append(chunk)
                bytes += chunk.readableBytes
            }
            state.writeInFlight = true
            return (chunks, state.written)
        }
        guard let batch else {
            verifyIfDone()
            return
        }
        let (file, hasher, fault) = (file, hasher, writeFault)
        pool.runIfActive(eventLoop: eventLoop) { () -> (bytes: Int, error: (any Error)?) in
            // A test's fault stops the batch before the chunk it names.
            var ready = batch.chunks.count
            var failure: (any Error)?
            if let fault {
                var position = batch.at
                for (index, chunk) in batch.chunks.enumerated() {
                    do { try fault(position) } catch {
                        (ready, failure) = (index, error)
                        break
                    }
                    position += UInt64(chunk.readableBytes)
                }
            }
            let (landed, error) = file.write(batch.chunks.prefix(ready), at: batch.at)
            // Hashes exactly the bytes that landed, even when a write stopped short, so a
            // partial kept after a failed write has a hash state of exactly its bytes.
            var left = landed
            for chunk in batch.chunks where left > 0 {
                let count = min(left, chunk.readableBytes)
                chunk.withUnsafeReadableBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
                left -= count
            }
            file.writeBack(through: batch.at + UInt64(landed))
            return (landed, error ?? failure)
        }.whenComplete { [self] outcome in
            let (bytes, failure): (Int, (any Error)?) = switch outcome {
            case .success(let written): written
            case .failure(let error): (0, error)  // the pool is shutting down: nothing was written
            }
            let (written, lost) = state.withLock { state -> (UInt64, TransferError?) in
                state.writeInFlight = false
                state.written += UInt64(bytes)
                return (state.written, state.failedWhileWriting)
            }
            if let lost {
                // What landed is whole. Its window is not returned: the connection is gone.
                keepPartialAndReport(lost)
                return
            }
            if let failure {
                storageFailed(failure)
            } else {
                linkage.channelTaken(bytes, on: channel)
                onProgress(written)
                writeMore()
            }
        }
    }

    private func verifyIfDone() {
        let check = state.withLock { state -> (SHA256Digest, UInt64)? in
            guard state.result == nil, !state.writeInFlight, state.pending.isEmpty, let expected = state.expectedDigest else { return nil }
            state.writeInFlight = true  // nothing else runs on the file now
            state.verifying = true
            return (expected, state.written)
        }
        guard let (expected, written) = check else { return }
        if let failure = ResourceVerdict.length(received: written, offered: offer.size) {
            answer(failure)
            return
        }
        let (file, hasher, fault) = (file, hasher, writeFault)
        pool.runIfActive(eventLoop: eventLoop) { () throws -> [UInt8] in
            try fault?(written)
            try file.sync()
            return hasher.finalize()
        }.whenComplete { [self] result in
            switch result {
            case .success(let digest): answer(ResourceVerdict.digest(computed: digest, expected: expected))
            case .failure(let error): storageFailed(error)
            }
        }
    }

    /// Answers RESOURCE_COMPLETE as the verdict says: the file is kept, or goes.
    private func answer(_ failure: TransferError?) {
        guard claim(failure.map { .failure($0) } ?? .success(path)) else { return }
        linkage.channelSend(ResourceVerdict.answer(on: channel, failure: failure))
        report(removeFile: failure != nil)
    }

    private func storageFailed(_ error: any Error) {
        guard claim(.failure(TransferError(.storageFailure, detail: "\(error)"))) else { return }
        linkage.channelSend(.resourceCancel(channel: channel, reason: .storageFailure))
        report(removeFile: true)
    }

    /// Takes the outcome if none was taken yet; the one caller that wins sends the final frame.
    /// Bytes still queued are dropped, and their window goes back to the peer.
    private func claim(_ result: Result<String, TransferError>) -> Bool {
        let (won, dropped) = state.withLock { state -> (Bool, Int) in
            guard state.result == nil else { return (false, 0) }
            return (true, state.takeOutcome(result))
        }
        if dropped > 0 { linkage.channelTaken(dropped, on: channel) }
        return won
    }

    private func report(removeFile: Bool) {
        guard let (result, interrupted) = state.withLock({ state in state.result.map { ($0, state.interrupted) } }) else { return }
        if removeFile { FileNames.remove(path) }
        // Only the loss itself goes unreported; anything else (a cancel) ends the transfer.
        if !interrupted || result.connectionLost == nil { onCompletion(result) }
        let waiters = state.withLock { state in
            state.settled = true
            defer { state.settledWaiters = [] }
            return state.settledWaiters
        }
        for waiter in waiters { waiter() }
    }
}

extension Result<String, TransferError> {
    /// The error, when the outcome is a lost connection.
    fileprivate var connectionLost: TransferError? {
        if case .failure(let error) = self, error.code == .connectionLost { error } else { nil }
    }
}
