import MultipeerWire
import NIOCore
import Synchronization
import MultipeerProtocol

/// The writing end of a named byte stream to one peer (docs/PROTOCOL.md §6.4.9-§6.4.13).
/// Bytes wait in a bounded buffer until the peer's windows let them go, so a reader that stops
/// reading stops the writer: `write(_:)` suspends and `write(from:)` takes less.
/// Thread-safe; the engine drains it on its event loop.
package final class ByteStreamWriter: Sendable, OutboundChannel {
    package enum Event: Sendable {
        /// Room again after a write that did not fit.
        case spaceAvailable
        case failed(TransferError)
    }

    private struct State {
        /// Written chunks, never written to again once queued: slicing them for frames copies
        /// nothing (one growing buffer would be copied whole whenever a frame still held a slice).
        var chunks = CircularBuffer<ByteBuffer>()
        var buffered = 0
        var closeRequested = false
        var finishSent = false
        var failure: TransferError?
        var channel: UInt32?
        var linkage: (any ChannelLinkage)?
        var spaceWaiters: [UnsafeContinuation<Void, any Error>] = []
        /// `finish()` callers, resumed once STREAM_CLOSE is handed to the connection, or failed.
        var finishWaiters: [UnsafeContinuation<Void, any Error>] = []
        var wantsSpaceEvent = false
        var observer: (@Sendable (Event) -> Void)?
        /// Sent and not yet acknowledged, oldest first, on a connection that acknowledges streams
        /// (docs/PROTOCOL.md §7.10): what goes again when the stream resumes.
        var retained = CircularBuffer<ByteBuffer>()
        var retainedBytes = 0
        var retaining = false
        var ordinal: UInt32?
        /// A resumed stream whose STREAM_CLOSE went with the lost link goes again after the
        /// rewound bytes; `finish()` has told the app already, and that stands.
        var resendClose = false
    }

    package let name: String
    package let peer: WirePeerID
    /// Bytes the writer holds before `write` waits; the windows bound what is in flight beyond it.
    package let bufferLimit: Int
    private let state = Mutex(State())

    init(name: String, peer: WirePeerID, bufferLimit: Int) {
        self.name = name
        self.peer = peer
        self.bufferLimit = max(1, bufferLimit)
    }

    /// Called with events from the engine's thread; set it before writing for `spaceAvailable`.
    package func setObserver(_ observer: (@Sendable (Event) -> Void)?) {
        state.withLock { $0.observer = observer }
    }

    /// Whether `write(from:)` would take at least one byte now.
    package var hasSpaceAvailable: Bool {
        state.withLock { $0.failure == nil && !$0.closeRequested && $0.buffered < bufferLimit }
    }

    package var failure: TransferError? { state.withLock { $0.failure } }
    /// Bytes written and not yet handed to the connection.
    package var bufferedByteCount: Int { state.withLock { $0.buffered } }

    /// Takes as many bytes as fit now and returns how many (0: no room now, an event follows when
    /// there is). Throws once the stream failed or was closed.
    package func write(from bytes: UnsafeRawBufferPointer) throws(TransferError) -> Int {
        let (taken, linkage, channel) = try state.withLock { state throws(TransferError) -> (Int, (any ChannelLinkage)?, UInt32?) in
            if let failure = state.failure { throw failure }
            guard !state.closeRequested else { throw TransferError(.invalidParameter, detail: "write after close") }
            let room = bufferLimit - state.buffered
            let count = min(room, bytes.count)
            guard count > 0 else {
                state.wantsSpaceEvent = true
                return (0, nil, nil)
            }
            // A write that filled the buffer is owed an event once there is room again.
            if state.buffered + count >= bufferLimit { state.wantsSpaceEvent = true }
            let wasEmpty = state.buffered == 0
            state.chunks.append(ByteBuffer(bytes: UnsafeRawBufferPointer(rebasing: bytes.prefix(count))))
            state.buffered += count
            return (count, wasEmpty ? state.linkage : nil, state.channel)
        }
        if let linkage, let channel { linkage.channelReady(channel) }
        return taken
    }

    /// Writes all of `bytes`, waiting while the buffer is full. Throws if the stream fails
    /// (reset by the peer, connection lost) or was closed.
    package func write(_ bytes: ByteBuffer) async throws(TransferError) {
        var remaining = bytes
        while remaining.readableBytes > 0 {
            let taken = try remaining.withUnsafeReadableBytes { raw throws(TransferError) in try write(from: raw) }
            remaining.moveReaderIndex(forwardBy: taken)
            if taken == 0 { try await waitForSpace() }
        }
    }

    package func write(_ bytes: some Sequence<UInt8>) async throws(TransferError) {
        try await write(ByteBuffer(bytes: Array(bytes)))
    }

    private func waitForSpace() async throws(TransferError) {
        try await wait(until: { $0.buffered < bufferLimit }, in: \.spaceWaiters)
    }

    /// Returns once `ready` holds, or throws the stream's failure; otherwise parks the caller in
    /// `waiters`, which the engine's side resumes (or fails).
    private func wait(
        until ready: (State) -> Bool, in waiters: WritableKeyPath<State, [UnsafeContinuation<Void, any Error>]>
    ) async throws(TransferError) {
        do {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                let resumeNow: Result<Void, TransferError>? = state.withLock { state in
                    if let failure = state.failure { return .failure(failure) }
                    if ready(state) { return .success(()) }
                    state[keyPath: waiters].append(continuation)
                    return nil
                }
                if let resumeNow { continuation.resume(with: resumeNow) }
            }
        } catch let error as TransferError {
            throw error
        } catch {
            throw TransferError(.connectionLost)
        }
    }

    /// Ends the stream once buffered bytes are sent (STREAM_CLOSE). Idempotent.
    package func close() {
        let wake = state.withLock { state -> ((any ChannelLinkage)?, UInt32?) in
            guard !state.closeRequested, state.failure == nil else { return (nil, nil) }
            state.closeRequested = true
            return (state.linkage, state.channel)
        }
        if let linkage = wake.0, let channel = wake.1 { linkage.channelReady(channel) }
    }

    /// Closes the stream and returns once every byte and the close were handed to the connection;
    /// throws if the stream failed first (the reader reset it, the connection was lost). Unlike
    /// `close()`, a writer learns that a refused or cancelled stream did not get through.
    package func finish() async throws(TransferError) {
        close()
        try await wait(until: \.finishSent, in: \.finishWaiters)
    }

    /// Abandons the stream (STREAM_RESET 1); buffered bytes are dropped.
    package func cancel() {
        let send = state.withLock { state -> ((any ChannelLinkage)?, UInt32?) in
            guard state.failure == nil, !state.finishSent else { return (nil, nil) }
            state.failure = TransferError(.cancelled)
            state.chunks.removeAll()
            state.buffered = 0
            state.retained.removeAll()
            state.retainedBytes = 0
            return (state.linkage, state.channel)
        }
        failWaiters(TransferError(.cancelled), notify: false)
        if let linkage = send.0, let channel = send.1 {
            linkage.channelSend(.streamReset(channel: channel, code: .cancelled))
        }
    }

    // MARK: The engine's side (on its loop)

    package var carriesResource: Bool { false }

    package func bind(channel: UInt32, linkage: any ChannelLinkage) -> Bool {
        let (wanted, ready) = state.withLock { state -> (Bool, Bool) in
            state.channel = channel
            state.linkage = linkage
            return (state.failure == nil, state.buffered > 0 || state.closeRequested)
        }
        if wanted && ready { linkage.channelReady(channel) }
        return wanted
    }

    package func openingFrame(channel: UInt32, linkRecovery: Bool) -> Frame { .streamOpen(channel: channel, name: name) }

    // MARK: Across a lost link (docs/PROTOCOL.md §7.10; on the loop)

    /// Its number among our streams in the session, once it has one.
    package var ordinal: UInt32? { state.withLock { $0.ordinal } }

    /// From now on the stream is the member's, numbered `ordinal`: what is sent is kept until
    /// the peer acknowledges it.
    package func retain(as ordinal: UInt32) {
        state.withLock { state in
            state.ordinal = ordinal
            state.retaining = true
        }
    }

    /// The link went and the member recovers: the stream waits, unbound, for its next link.
    /// Writes go on into the buffer meanwhile.
    package func interrupt() {
        state.withLock { state in
            state.channel = nil
            state.linkage = nil
        }
    }

    /// The stream failed or was cancelled (a cancelled one may still have a reset to send).
    package var hasFailed: Bool { state.withLock { $0.failure != nil } }

    /// Whether `linkage` carries the stream now.
    package func isBound(to linkage: any ChannelLinkage) -> Bool { state.withLock { $0.linkage === linkage } }

    /// The peer acknowledged `released` more bytes; on the answer to our STREAM_RESUME the rest
    /// of what we had sent (`rewound` bytes) goes again, ahead of what was never sent, and so
    /// does STREAM_CLOSE if we had closed.
    package func acknowledged(released: UInt64, rewound: UInt64, answering: Bool) {
        state.withLock { state in
            var drop = Int(clamping: released)
            while drop > 0, var first = state.retained.first {
                let cut = min(drop, first.readableBytes)
                first.moveReaderIndex(forwardBy: cut)
                drop -= cut
                state.retainedBytes -= cut
                if first.readableBytes == 0 { state.retained.removeFirst() } else { state.retained[state.retained.startIndex] = first }
            }
            guard answering, state.failure == nil else { return }
            while let last = state.retained.popLast() { state.chunks.prepend(last) }
            state.buffered += state.retainedBytes
            state.retainedBytes = 0
            if state.finishSent { state.resendClose = true }
        }
    }

    package func nextOutput(allowance: Int) -> ChannelOutput {
        var finished: [UnsafeContinuation<Void, any Error>] = []
        defer { for waiter in finished { waiter.resume() } }
        let (output, wakeWaiters) = state.withLock { state -> (ChannelOutput, Bool) in
            guard state.failure == nil, !state.finishSent || state.resendClose else { return (.idle, false) }
            if var first = state.chunks.first {
                guard allowance > 0 else { return (.blocked, false) }
                let wasFull = state.buffered >= bufferLimit || state.wantsSpaceEvent
                let slice = first.readSlice(length: min(allowance, first.readableBytes))!
                if first.readableBytes == 0 { state.chunks.removeFirst() } else { state.chunks[state.chunks.startIndex] = first }
                state.buffered -= slice.readableBytes
                if state.retaining {
                    state.retained.append(slice)
                    state.retainedBytes += slice.readableBytes
                }
                return (.data(slice), wasFull)
            }
            if state.closeRequested {
                if state.resendClose {
                    state.resendClose = false
                    return (.finish(.streamClose(channel: state.channel ?? 0)), false)
                }
                state.finishSent = true
                finished = state.finishWaiters
                state.finishWaiters = []
                return (.finish(.streamClose(channel: state.channel ?? 0)), false)
            }
            return (.idle, false)
        }
        if wakeWaiters { spaceFreed() }
        return output
    }

    private func spaceFreed() {
        let (waiters, observer) = state.withLock { state -> ([UnsafeContinuation<Void, any Error>], (@Sendable (Event) -> Void)?) in
            defer { state.spaceWaiters = []; state.wantsSpaceEvent = false }
            return (state.spaceWaiters, state.wantsSpaceEvent ? state.observer : nil)
        }
        for waiter in waiters { waiter.resume() }
        observer?(.spaceAvailable)
    }

    package func peerSent(_ frame: Frame) {
        switch frame {
        case .streamReset(_, let code):
            failed(TransferError.fromPeerReset(code))
        default:
            break
        }
    }

    package func failed(_ error: TransferError) {
        let first = state.withLock { state -> Bool in
            guard state.failure == nil, !state.finishSent else { return false }
            state.failure = error
            state.chunks.removeAll()
            state.buffered = 0
            state.retained.removeAll()
            state.retainedBytes = 0
            return true
        }
        if first { failWaiters(error, notify: true) }
    }

    private func failWaiters(_ error: TransferError, notify: Bool) {
        let (waiters, observer) = state.withLock { state in
            defer { state.spaceWaiters = []; state.finishWaiters = [] }
            return (state.spaceWaiters + state.finishWaiters, state.observer)
        }
        for waiter in waiters { waiter.resume(throwing: error) }
        if notify { observer?(.failed(error)) }
    }
}
