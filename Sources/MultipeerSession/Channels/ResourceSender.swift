import MultipeerCrypto
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// Sends one file on a resource channel (docs/PROTOCOL.md §7.8): RESOURCE_OFFER, then, once the
/// receiver accepted at an offset, the bytes from there in window-sized chunks, then
/// RESOURCE_COMPLETE with the SHA-256 of the whole file. The file is read on a thread pool a
/// block at a time with a bounded read-ahead, never whole; the digest covers a skipped prefix too.
final class ResourceSender: OutboundChannel {
    /// Four full frames, so a block leaves no small frame behind.
    static let readBlock = 4 * Frame.largestSentPayload
    static let readAhead = 1 << 20

    struct Source: Sendable {
        let file: OpenFile
        let size: UInt64
        let name: String
        let transferID: Bytes16
        /// This send's number (docs/PROTOCOL.md §7.9): drawn once, the same on every offer of
        /// the transfer, on whichever connection, so the receiver tells it from other sends of
        /// the same content.
        let sendID = UInt64.random(in: .min ... .max)
        /// Accepted on an earlier connection, its verdict unheard: offered again RESUMED
        /// (docs/PROTOCOL.md §7.9), now and on every later connection.
        var resumed = false
    }

    private struct State {
        var channel: UInt32?
        var linkage: (any ChannelLinkage)?
        var offset: UInt64?
        var readPosition: UInt64 = 0
        var readInFlight = false
        var buffered = CircularBuffer<ByteBuffer>()
        var bufferedBytes = 0
        var sent: UInt64 = 0
        var digest: SHA256Digest?
        var completeSent = false
        var result: Result<Void, TransferError>?
    }

    let source: Source
    let peer: WirePeerID
    private let pool: NIOThreadPool
    private let eventLoop: any EventLoop
    /// Fed in file order on the pool, one read at a time.
    private let hasher = SHA256Hasher()
    private let state = Mutex(State())
    private let onProgress: @Sendable (_ completed: UInt64) -> Void
    private let onCompletion: @Sendable (Result<Void, TransferError>) -> Void

    init(
        source: Source, peer: WirePeerID, pool: NIOThreadPool, eventLoop: any EventLoop,
        onProgress: @escaping @Sendable (UInt64) -> Void, onCompletion: @escaping @Sendable (Result<Void, TransferError>) -> Void
    ) {
        self.source = source
        self.peer = peer
        self.pool = pool
        self.eventLoop = eventLoop
        self.onProgress = onProgress
        self.onCompletion = onCompletion
    }

    var carriesResource: Bool { true }

    /// On the loop, before the opening frame: false when the transfer was cancelled meanwhile.
    func bind(channel: UInt32, linkage: any ChannelLinkage) -> Bool {
        state.withLock { state in
            state.channel = channel
            state.linkage = linkage
            return state.result == nil
        }
    }

    func openingFrame(channel: UInt32, linkRecovery: Bool) -> Frame {
        // The size and name were checked when the transfer was made.
        .resourceOffer(
            channel: channel,
            try! ResourceOffer(
                size: source.size, transferID: source.transferID, name: source.name, resumed: source.resumed,
                sendID: linkRecovery ? source.sendID : nil))
    }

    /// Stops the transfer (RESOURCE_CANCEL 1); the completion reports `cancelled`. The outcome is
    /// claimed before the frame goes out, so a RESOURCE_RECEIVED racing it cannot also succeed.
    func cancel() {
        let error = TransferError(.cancelled)
        let (won, target) = state.withLock { state -> (Bool, (any ChannelLinkage, UInt32)?) in
            guard state.result == nil else { return (false, nil) }
            state.result = .failure(error)
            state.buffered.removeAll()
            state.bufferedBytes = 0
            guard let linkage = state.linkage, let channel = state.channel else { return (true, nil) }
            return (true, (linkage, channel))
        }
        guard won else { return }
        if let (linkage, channel) = target {
            linkage.channelSend(.resourceCancel(channel: channel, reason: .cancelled))
        }
        onCompletion(.failure(error))
    }

    // MARK: On the loop

    func nextOutput(allowance: Int) -> ChannelOutput {
        let (output, progress) = state.withLock { state -> (ChannelOutput, UInt64?) in
            guard state.result == nil, !state.completeSent, let offset = state.offset else { return (.idle, nil) }
            if var first = state.buffered.first {
                guard allowance > 0 else { return (.blocked, nil) }
                let slice = first.readSlice(length: min(allowance, first.readableBytes))!
                if first.readableBytes == 0 { state.buffered.removeFirst() } else { state.buffered[state.buffered.startIndex] = first }
                state.bufferedBytes -= slice.readableBytes
                state.sent += UInt64(slice.readableBytes)
                return (.data(slice), offset + state.sent)
            }
            if let digest = state.digest, state.sent == source.size - offset, let channel = state.channel {
                state.completeSent = true
                return (.finish(.resourceComplete(channel: channel, sha256: digest)), nil)
            }
            return (.idle, nil)
        }
        if let progress {
            onProgress(progress)
            readMore()
        }
        return output
    }

    func peerSent(_ frame: Frame) {
        switch frame {
        case .resourceAccept(_, let offset):
            state.withLock { state in
                state.offset = offset
                // Bytes before the offset are read only to be hashed.
                state.readPosition = 0
            }
            onProgress(offset)
            readMore()
        case .resourceReceived:
            finish(.success(()))
        case .resourceCancel(_, let reason):
            finish(.failure(TransferError.fromPeerCancel(reason)))
        case .streamReset(_, let code):
            finish(.failure(TransferError.fromPeerReset(code)))
        default:
            break
        }
    }

    func failed(_ error: TransferError) {
        finish(.failure(error))
    }

    /// Whether the receiver accepted the offer: only then can it hold a partial or a verdict of
    /// this transfer, so only then is it offered again RESUMED (docs/PROTOCOL.md §7.9).
    var wasAccepted: Bool { state.withLock { $0.offset != nil } }

    /// The connection was lost but the member recovers: this sender stops without reporting, and
    /// the transfer goes on with a new one on the resumed connection. False when it had ended.
    func interrupt() -> Bool {
        state.withLock { state in
            guard state.result == nil else { return false }
            state.result = .failure(TransferError(.connectionLost))
            state.buffered.removeAll()
            state.bufferedBytes = 0
            return true
        }
    }

    private func readMore() {
        let next = state.withLock { state -> (position: UInt64, count: Int)? in
            guard state.result == nil, !state.readInFlight, state.offset != nil, state.digest == nil,
                state.bufferedBytes < Self.readAhead, state.readPosition < source.size
            else { return nil }
            state.readInFlight = true
            return (state.readPosition, Int(min(UInt64(Self.readBlock), source.size - state.readPosition)))
        }
        guard let next else {
            finalizeDigestIfEmpty()
            return
        }
        let file = source.file
        let hasher = hasher
        pool.runIfActive(eventLoop: eventLoop) { () throws -> ByteBuffer in
            let block = try file.read(count: next.count, at: next.position)
            block.withUnsafeReadableBytes { hasher.update($0) }
            return block
        }.whenComplete { [self] result in
            switch result {
            case .success(let block) where block.readableBytes == next.count:
                blockRead(block, at: next.position)
            case .success:
                abandon(TransferError(.sourceFailure, detail: "the file shrank while it was sent"))
            case .failure(let error):
                abandon(TransferError(.sourceFailure, detail: "\(error)"))
            }
        }
    }

    private func blockRead(_ block: ByteBuffer, at position: UInt64) {
        let ready = state.withLock { state -> Bool in
            state.readInFlight = false
            guard state.result == nil, let offset = state.offset else { return false }
            let end = position + UInt64(block.readableBytes)
            state.readPosition = end
            if end > offset {
                var part = block
                if position < offset { part.moveReaderIndex(forwardBy: Int(offset - position)) }
                state.buffered.append(part)
                state.bufferedBytes += part.readableBytes
            }
            if end == source.size {
                state.digest = try? SHA256Digest(bytes: hasher.finalize())
            }
            return state.bufferedBytes > 0 || state.digest != nil
        }
        if ready, let (linkage, channel) = target() { linkage.channelReady(channel) }
        readMore()
    }

    /// An empty file (or one accepted at its end with nothing to read) has its digest at once.
    private func finalizeDigestIfEmpty() {
        let ready = state.withLock { state -> Bool in
            guard state.result == nil, state.offset != nil, state.digest == nil, !state.readInFlight, source.size == 0 else { return false }
            state.digest = try? SHA256Digest(bytes: hasher.finalize())
            return true
        }
        if ready, let (linkage, channel) = target() { linkage.channelReady(channel) }
    }

    private func target() -> (any ChannelLinkage, UInt32)? {
        state.withLock { state in
            guard let linkage = state.linkage, let channel = state.channel else { return nil }
            return (linkage, channel)
        }
    }

    /// The source failed: tell the receiver and report.
    private func abandon(_ error: TransferError) {
        if let (linkage, channel) = target(), state.withLock({ $0.result == nil }) {
            linkage.channelSend(.resourceCancel(channel: channel, reason: .cancelled))
        }
        finish(.failure(error))
    }

    private func finish(_ result: Result<Void, TransferError>) {
        let first = state.withLock { state -> Bool in
            guard state.result == nil else { return false }
            state.result = result
            state.buffered.removeAll()
            state.bufferedBytes = 0
            return true
        }
        // The file closes when the last read that holds it ends (never under a read in flight).
        guard first else { return }
        onCompletion(result)
    }
}
