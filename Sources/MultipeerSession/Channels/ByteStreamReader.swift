import MultipeerWire
import NIOCore
import Synchronization
import MultipeerProtocol

/// The reading end of a named byte stream from one peer. Holds at most what the windows let the
/// peer send (docs/PROTOCOL.md §7.6); window goes back as the application reads, so a reader
/// that stops reading stops the writer. An `AsyncSequence` of chunks that ends at STREAM_CLOSE
/// and throws when the stream is reset or the connection lost; or read it by polling
/// (`read(into:)`). Thread-safe.
package final class ByteStreamReader: Sendable, InboundChannel, AsyncSequence {
    package typealias Element = ByteBuffer

    package enum Event: Sendable {
        case bytesAvailable
        case endEncountered
        case failed(TransferError)
    }

    private struct State {
        var chunks = ChunkQueue()
        var ended = false
        var failure: TransferError?
        var waiter: UnsafeContinuation<Void, Never>?
        var observer: (@Sendable (Event) -> Void)?
        var cancelled = false
        var channel: UInt32
        var linkage: any ChannelLinkage
        /// Bytes still buffered from an earlier connection (§7.10): taking them gives no window
        /// back on the present one, which never counted them.
        var stale = 0
        /// Runs (on the caller's thread, outside the lock) once the stale bytes are all taken.
        var staleDrained: (@Sendable () -> Void)?

        /// The window to give back for `count` bytes taken now, oldest first.
        mutating func fresh(_ count: Int) -> Int {
            let old = Swift.min(stale, count)
            stale -= old
            return count - old
        }

        /// The drain callback, once it is due.
        mutating func takeDrained() -> (@Sendable () -> Void)? {
            guard stale == 0, let callback = staleDrained else { return nil }
            staleDrained = nil
            return callback
        }
    }

    package let name: String
    package let peer: WirePeerID
    /// Its number among the peer's streams in the session, when the connection acknowledges
    /// streams (docs/PROTOCOL.md §7.10): a reader kept across a lost link is found by it.
    package let ordinal: UInt32?

    deinit {
        // Bytes nobody will read: their window goes back to the peer.
        let (fresh, channel, linkage) = state.withLock { state in
            (state.fresh(state.chunks.removeAll()), state.channel, state.linkage)
        }
        if fresh > 0 { linkage.channelTaken(fresh, on: channel) }
    }

    private let state: Mutex<State>

    package init(name: String, peer: WirePeerID, channel: UInt32, linkage: any ChannelLinkage, ordinal: UInt32? = nil) {
        self.name = name
        self.peer = peer
        self.ordinal = ordinal
        state = Mutex(State(channel: channel, linkage: linkage))
    }

    /// The channel it is read from now (the peer may carry it on to another connection).
    var channel: UInt32 { state.withLock { $0.channel } }

    /// On the loop: the peer continues the stream on `channel` of a new connection (§7.10).
    /// False when the reader has ended meanwhile (the application cancelled it while the link
    /// was down): the caller resets the stream instead. `drained` runs once the application has
    /// taken the bytes held from earlier connections (at once when there are none): only then
    /// may the peer send more, so that unread bytes never exceed a window however often the
    /// link goes.
    package func rebind(channel: UInt32, linkage: any ChannelLinkage, drained: @escaping @Sendable () -> Void) -> Bool {
        let (rebound, now) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard !state.ended, state.failure == nil, !state.cancelled else { return (false, nil) }
            state.channel = channel
            state.linkage = linkage
            state.stale = state.chunks.byteCount
            state.staleDrained = drained
            return (true, state.takeDrained())
        }
        now?()
        return rebound
    }

    /// Whether `linkage` carries the stream now.
    package func isBound(to linkage: any ChannelLinkage) -> Bool { state.withLock { $0.linkage === linkage } }

    /// Whether the stream is still being read: not at its end, failed or cancelled.
    package var isReading: Bool { state.withLock { !$0.ended && $0.failure == nil && !$0.cancelled } }

    /// Called with events from the engine's thread (and once at once for what is already there).
    package func setObserver(_ observer: (@Sendable (Event) -> Void)?) {
        let pending = state.withLock { state -> Event? in
            state.observer = observer
            if let failure = state.failure { return .failed(failure) }
            if state.chunks.byteCount > 0 { return .bytesAvailable }
            return state.ended ? .endEncountered : nil
        }
        if let pending { observer?(pending) }
    }

    package var hasBytesAvailable: Bool { state.withLock { $0.chunks.byteCount > 0 } }
    /// Bytes arrived and not yet read: never more than the channel's window (docs/PROTOCOL.md
    /// §7.6), counting bytes held from an earlier connection (§7.10: the peer sends no more until
    /// they are read).
    package var bufferedByteCount: Int { state.withLock { $0.chunks.byteCount } }
    /// Buffers held for those bytes (bounded by the bytes, whatever the peer's frame sizes).
    var bufferedChunkCount: Int { state.withLock { $0.chunks.chunkCount } }
    /// The writer closed and every byte has been read.
    package var isAtEnd: Bool { state.withLock { $0.ended && $0.chunks.byteCount == 0 } }
    package var failure: TransferError? { state.withLock { $0.failure } }

    /// Copies up to `buffer.count` bytes; 0 when none are available now (see `isAtEnd`).
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let (copied, fresh, channel, linkage, drained) = state.withLock { state in
            let copied = state.chunks.read(into: buffer)
            return (copied, state.fresh(copied), state.channel, state.linkage, state.takeDrained())
        }
        if fresh > 0 { linkage.channelTaken(fresh, on: channel) }
        drained?()
        return copied
    }

    /// The next chunk, waiting for one; nil at the end of the stream.
    package func next() async throws(TransferError) -> ByteBuffer? {
        while true {
            // One lock per chunk: the chunk, the window it gives back, and a resumed answer now due.
            let outcome = state.withLock { state -> (Result<ByteBuffer?, TransferError>, Int, UInt32, any ChannelLinkage, (@Sendable () -> Void)?)? in
                if let chunk = state.chunks.popFirst() {
                    return (.success(chunk), state.fresh(chunk.readableBytes), state.channel, state.linkage, state.takeDrained())
                }
                if let failure = state.failure { return (.failure(failure), 0, state.channel, state.linkage, nil) }
                return state.ended ? (.success(nil), 0, state.channel, state.linkage, nil) : nil
            }
            switch outcome?.0 {
            case .success(let chunk?):
                if let (_, fresh, channel, linkage, drained) = outcome {
                    if fresh > 0 { linkage.channelTaken(fresh, on: channel) }
                    drained?()
                }
                return chunk
            case .success(nil):
                return nil
            case .failure(let error):
                throw error
            case nil:
                await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                    let now = state.withLock { state -> Bool in
                        if !state.chunks.isEmpty || state.ended || state.failure != nil { return true }
                        state.waiter = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }

    /// Stops reading: buffered bytes are dropped (their window goes back to the peer) and a
    /// writer still writing is told (STREAM_RESET 1). Also after the end or a failure, to let
    /// go of what was never read.
    package func cancel() {
        let (send, dropped, channel, linkage) = state.withLock { state -> (Bool, Int, UInt32, any ChannelLinkage) in
            let dropped = state.fresh(state.chunks.removeAll())
            state.cancelled = true
            state.staleDrained = nil  // its reset answers the peer's resume instead
            guard !state.ended, state.failure == nil else { return (false, dropped, state.channel, state.linkage) }
            state.failure = TransferError(.cancelled)
            return (true, dropped, state.channel, state.linkage)
        }
        // The reset goes first: returning the dropped bytes' window while the channel is still
        // open would let the writer send the rest, close, and take the stream as delivered. Once
        // it ended, only the connection's share of the window goes back.
        if send {
            wake()
            linkage.channelSend(.streamReset(channel: channel, code: .cancelled))
        }
        if dropped > 0 { linkage.channelTaken(dropped, on: channel) }
    }

    package struct AsyncIterator: AsyncIteratorProtocol {
        let reader: ByteStreamReader
        package mutating func next() async throws -> ByteBuffer? { try await reader.next() }
    }

    package func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: self) }

    // MARK: The engine's side (on its loop)

    package func peerSent(_ frame: Frame) {
        switch frame {
        case .streamData(_, let data):
            let accepted = state.withLock { state -> (any ChannelLinkage)? in
                guard !state.cancelled else { return state.linkage }
                state.chunks.append(data)
                return nil
            }
            if let linkage = accepted {
                linkage.channelTaken(data.readableBytes, on: frame.channel)  // dropped: the connection's share goes back
            } else {
                notify(.bytesAvailable)
            }
        case .streamClose:
            state.withLock { $0.ended = true }
            notify(.endEncountered)
        case .streamReset(_, let code):
            failed(TransferError.fromPeerReset(code))
        default:
            break
        }
    }

    package func failed(_ error: TransferError) {
        let first = state.withLock { state -> Bool in
            guard !state.ended, state.failure == nil else { return false }
            state.failure = error
            return true
        }
        if first { notify(.failed(error)) }
    }

    private func notify(_ event: Event) {
        wake()
        state.withLock { $0.observer }?(event)
    }

    private func wake() {
        state.withLock { state in
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }
}
