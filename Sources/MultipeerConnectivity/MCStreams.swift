import Foundation
import MultipeerSession
import NIOCore
import Synchronization
import MultipeerProtocol

/// The `OutputStream` that `MCSession.startStream(withName:toPeer:)` returns. Behaves as Apple's:
/// open it, then write; `write` takes what fits in the stream's buffer and returns the count (0
/// when full: a `hasSpaceAvailable` event follows once there is room, or poll
/// `hasSpaceAvailable`); scheduled in a run loop, its delegate gets `openCompleted`,
/// `hasSpaceAvailable` and `errorOccurred` there. `close()` sends what is buffered, then ends the
/// stream for the reader.
public final class MCOutputStream: OutputStream {
    private let core: OutputCore
    private weak var streamDelegate: (any StreamDelegate)?

    init(writer: ByteStreamWriter) {
        core = OutputCore(writer: writer)
        super.init(toMemory: ())
        core.attach(to: self)
    }

    /// Released without `close()`: closed, as Apple's streams are, so the reader sees the end.
    deinit { core.close() }

    @available(*, unavailable, message: "made by MCSession.startStream(withName:toPeer:)")
    public required init(toMemory: ()) {
        fatalError("MCOutputStream is made by MCSession.startStream(withName:toPeer:)")
    }

    public override var delegate: (any StreamDelegate)? {
        get { streamDelegate }
        set { streamDelegate = newValue }
    }

    public override var streamStatus: Stream.Status { core.streamStatus }
    public override var streamError: (any Error)? { core.writer.failure.map { MCError(transfer: $0) } }
    public override func open() { core.open() }
    public override func close() { core.close() }
    public override var hasSpaceAvailable: Bool { core.hasSpaceAvailable }

    /// Takes up to `len` bytes; returns how many (0: no room now), or -1 once the stream failed
    /// (see `streamError`) or if it is not open.
    public override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        core.write(UnsafeRawBufferPointer(start: buffer, count: max(0, len)))
    }

    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events.schedule(in: aRunLoop, forMode: mode)
    }

    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events.remove(from: aRunLoop, forMode: mode)
    }
}

/// The thread-safe state behind an `MCOutputStream`.
private final class OutputCore: Sendable {
    let writer: ByteStreamWriter
    private let status = Mutex<Stream.Status>(.notOpen)
    let events = StreamEventDelivery()

    init(writer: ByteStreamWriter) { self.writer = writer }

    func attach(to stream: Stream) {
        events.stream = stream
        writer.setObserver { [weak self] event in
            guard let self else { return }
            switch event {
            case .spaceAvailable: postSpace()
            case .failed: events.post(.errorOccurred)
            }
        }
    }

    var streamStatus: Stream.Status {
        let current = status.withLock { $0 }
        if current == .open, writer.failure != nil { return .error }
        return current
    }

    var hasSpaceAvailable: Bool { status.withLock { $0 } == .open && writer.hasSpaceAvailable }

    func open() {
        let opened = status.withLock { status -> Bool in
            guard status == .notOpen else { return false }
            status = .open
            return true
        }
        guard opened else { return }
        events.post(.openCompleted)
        postSpace()
    }

    func close() {
        let closing = status.withLock { status -> Bool in
            guard status != .closed else { return false }
            status = .closed
            return true
        }
        if closing { writer.close() }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard status.withLock({ $0 }) == .open else { return -1 }
        do {
            let taken = try writer.write(from: bytes)
            // Level-triggered, as a socket stream: room left means another event.
            if taken > 0 && writer.hasSpaceAvailable { postSpace() }
            return taken
        } catch {
            return -1
        }
    }

    private func postSpace() {
        events.post(.hasSpaceAvailable) { [weak self] in self?.hasSpaceAvailable ?? false }
    }
}

/// The `InputStream` handed to `session(_:didReceive:withName:fromPeer:)`. Behaves as Apple's:
/// open it, then read, from a run loop's `hasBytesAvailable` events or by polling; `read` waits
/// until at least one byte is there and returns 0 at the end of the stream, -1 on an error (the
/// writer reset it, or the connection was lost). Unread bytes hold the writer back (flow
/// control), so read promptly or `close()`, which tells the writer to stop.
public final class MCInputStream: InputStream {
    private let core: InputCore
    private weak var streamDelegate: (any StreamDelegate)?

    init(reader: ByteStreamReader) {
        core = InputCore(reader: reader)
        super.init(data: Data())
        core.events.stream = self
    }

    /// Released without `close()`: closed, so a writer still writing is told and unread bytes
    /// stop holding its window.
    deinit { core.close() }

    public override var delegate: (any StreamDelegate)? {
        get { streamDelegate }
        set { streamDelegate = newValue }
    }

    public override var streamStatus: Stream.Status { core.streamStatus }
    public override var streamError: (any Error)? {
        core.reader.failure.flatMap { $0.code == .cancelled ? nil : MCError(transfer: $0) }
    }
    public override func open() { core.open() }
    /// Stops reading; a writer still writing is told (STREAM_RESET) and its bytes are dropped.
    public override func close() { core.close() }
    public override var hasBytesAvailable: Bool { core.hasBytesAvailable }

    public override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        core.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max(0, len)))
    }

    /// Apple's streams of this kind have no buffer to lend.
    public override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events.schedule(in: aRunLoop, forMode: mode)
    }

    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events.remove(from: aRunLoop, forMode: mode)
    }
}

/// The thread-safe state behind an `MCInputStream`.
private final class InputCore: @unchecked Sendable {
    // @unchecked: NSCondition is not Sendable in corelibs-foundation, but is thread-safe.
    let reader: ByteStreamReader
    private let status = Mutex<Stream.Status>(.notOpen)
    /// Wakes a blocked `read`.
    private let arrival = NSCondition()
    let events = StreamEventDelivery()

    init(reader: ByteStreamReader) { self.reader = reader }

    var streamStatus: Stream.Status {
        let current = status.withLock { $0 }
        guard current == .open else { return current }
        if reader.failure != nil { return .error }
        return reader.isAtEnd ? .atEnd : .open
    }

    var hasBytesAvailable: Bool { status.withLock { $0 } == .open && reader.hasBytesAvailable }

    func open() {
        let opened = status.withLock { status -> Bool in
            guard status == .notOpen else { return false }
            status = .open
            return true
        }
        guard opened else { return }
        events.post(.openCompleted)
        reader.setObserver { [weak self] event in self?.readerEvent(event) }
    }

    func close() {
        let closing = status.withLock { status -> Bool in
            guard status != .closed else { return false }
            status = .closed
            return true
        }
        guard closing else { return }
        reader.setObserver(nil)
        reader.cancel()
        wakeReaders()
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard buffer.count > 0 else { return 0 }
        arrival.lock()
        defer { arrival.unlock() }
        while true {
            guard status.withLock({ $0 }) == .open else { return -1 }
            let count = reader.read(into: buffer)
            if count > 0 {
                // Level-triggered: what is still true after this read is reported again.
                if reader.hasBytesAvailable { postBytes() } else if reader.isAtEnd { postEnd() }
                return count
            }
            if reader.failure != nil { return -1 }
            if reader.isAtEnd { return 0 }
            arrival.wait()
        }
    }

    private func wakeReaders() {
        arrival.lock()
        arrival.broadcast()
        arrival.unlock()
    }

    private func postBytes() {
        events.post(.hasBytesAvailable) { [weak self] in self?.hasBytesAvailable ?? false }
    }

    private func postEnd() {
        events.post(.endEncountered) { [weak self] in self?.reader.isAtEnd ?? false }
    }

    private func readerEvent(_ event: ByteStreamReader.Event) {
        wakeReaders()
        switch event {
        case .bytesAvailable: postBytes()
        case .endEncountered: postEnd()
        case .failed: events.post(.errorOccurred)
        }
    }
}

// MARK: Swift-native streams

/// A stream to a peer for async code: `write` suspends while the peer's windows and the buffer
/// are full, so a slow reader slows the writer; `close()` ends it for the reader.
public struct MCStreamWriter: Sendable {
    let writer: ByteStreamWriter

    public var name: String { writer.name }

    public func write(_ data: Data) async throws(MCError) {
        do {
            try await writer.write(ByteBuffer(bytes: data))
        } catch {
            throw MCError(transfer: error)
        }
    }

    /// Ends the stream once everything written has been sent.
    public func close() { writer.close() }

    /// Closes the stream and returns once everything written, and the close, went to the
    /// connection; throws if the reader refused or reset the stream, or the connection was lost,
    /// before that. Use it to learn that a stream did not get through; `close()` cannot tell.
    public func finish() async throws(MCError) {
        do {
            try await writer.finish()
        } catch {
            throw MCError(transfer: error)
        }
    }

    /// Abandons the stream; the reader sees an error.
    public func cancel() { writer.cancel() }
}

/// A stream from a peer for async code: the chunks as they arrive; the sequence ends when the
/// writer closes the stream and throws `MCError` when it is reset or the connection is lost.
public struct MCStreamReader: AsyncSequence, Sendable {
    public typealias Element = Data
    let reader: ByteStreamReader

    public var name: String { reader.name }

    /// Stops reading; the writer is told.
    public func cancel() { reader.cancel() }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let reader: ByteStreamReader

        public mutating func next() async throws -> Data? {
            do {
                guard let chunk = try await reader.next() else { return nil }
                return Data(chunk.readableBytesView)
            } catch {
                throw MCError(transfer: error)
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: reader) }
}

extension MCError {
    /// A stream or resource failure in Apple's terms, with the detail kept in the reason.
    init(transfer error: TransferError) {
        let code: Code = switch error.code {
        case .notConnected, .connectionLost: .notConnected
        case .cancelled, .cancelledByPeer: .cancelled
        case .tooManyChannels: .unavailable
        case .invalidParameter, .tooLarge: .invalidParameter
        case .refusedByPeer: .unavailable
        default: .unknown
        }
        self.init(code, reason: "\(error)", transfer: error)
    }
}
