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
    }

    package let name: String
    package let peer: WirePeerID
    let channel: UInt32

    deinit {
        // Bytes nobody will read: their window goes back to the peer.
        let dropped = state.withLock { $0.chunks.removeAll() }
        if dropped > 0 { linkage.channelTaken(dropped, on: channel) }
    }

    private let linkage: any ChannelLinkage
    private let state = Mutex(State())

    package init(name: String, peer: WirePeerID, channel: UInt32, linkage: any ChannelLinkage) {
        self.name = name
        self.peer = peer
        self.channel = channel
        self.linkage = linkage
    }

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
    /// Bytes arrived and not yet read: never more than the channel's window (docs/PROTOCOL.md §7.6).
    package var bufferedByteCount: Int { state.withLock { $0.chunks.byteCount } }
    /// Buffers held for those bytes (bounded by the bytes, whatever the peer's frame sizes).
    var bufferedChunkCount: Int { state.withLock { $0.chunks.chunkCount } }
    /// The writer closed and every byte has been read.
    package var isAtEnd: Bool { state.withLock { $0.ended && $0.chunks.byteCount == 0 } }
    package var failure: TransferError? { state.withLock { $0.failure } }

    /// Copies up to `buffer.count` bytes; 0 when none are available now (see `isAtEnd`).
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let copied = state.withLock { $0.chunks.read(into: buffer) }
        if copied > 0 { linkage.channelTaken(copied, on: channel) }
        return copied
    }

    /// The next chunk, waiting for one; nil at the end of the stream.
    package func next() async throws(TransferError) -> ByteBuffer? {
        while true {
            let outcome = state.withLock { state -> Result<ByteBuffer?, TransferError>? in
                if let chunk = state.chunks.popFirst() { return .success(chunk) }
                if let failure = state.failure { return .failure(failure) }
                return state.ended ? .success(nil) : nil
            }
            switch outcome {
            case .success(let chunk?):
                linkage.channelTaken(chunk.readableBytes, on: channel)
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
        let (send, dropped) = state.withLock { state -> (Bool, Int) in
            let dropped = state.chunks.removeAll()
            state.cancelled = true
            guard !state.ended, state.failure == nil else { return (false, dropped) }
            state.failure = TransferError(.cancelled)
            return (true, dropped)
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
            let accepted = state.withLock { state -> Bool in
                guard !state.cancelled else { return false }
                state.chunks.append(data)
                return true
            }
            if accepted {
                notify(.bytesAvailable)
            } else {
                linkage.channelTaken(data.readableBytes, on: channel)  // dropped: the connection's share goes back
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
