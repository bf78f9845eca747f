import MultipeerSession
import NIOCore
import Synchronization
import MultipeerProtocol

extension MCSession {
    /// A session's events from the moment `events()` made it, in order, for `for await` loops.
    ///
    /// Events wait in memory until taken. Iteration ends when the iterating task is cancelled, when
    /// the stream is dropped, or when the session is deallocated. One task iterates a stream at a
    /// time; a second concurrent iterator gets nil. Written for the session's hot path: one lock
    /// per event, no per-event allocation while the consumer keeps up, and a consumer on the
    /// session's `taskExecutor` resumes on the network thread itself.
    public struct Events: AsyncSequence, Sendable {
        public typealias Element = Event
        public typealias Failure = Never

        let subscription: EventSubscription

        public func makeAsyncIterator() -> Iterator { Iterator(subscription: subscription) }

        public struct Iterator: AsyncIteratorProtocol {
            public typealias Element = Event
            public typealias Failure = Never

            let subscription: EventSubscription

            public mutating func next() async -> Event? {
                await subscription.channel.next(isolation: nil)
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async -> Event? {
                await subscription.channel.next(isolation: actor)
            }
        }
    }
}

/// Ends the channel when the last copy of its stream or iterator goes away, as AsyncStream does.
final class EventSubscription: Sendable {
    let channel: EventChannel

    init(channel: EventChannel) { self.channel = channel }

    deinit { channel.finish() }
}

/// One subscriber's queue: the session yields into it on its network thread, one task takes.
/// A message's receipt is consumed when its event is taken (or dropped with the stream), so a
/// consumer that stops taking stops its peers' connections from reading (receive budget).
final class EventChannel: Sendable {
    private struct Pending {
        let event: MCSession.Event
        let receipt: DeliveryReceipt

        /// The event, its message now counted as taken.
        func taken() -> MCSession.Event {
            receipt.consumed()
            return event
        }
    }

    private struct State {
        var buffer = CircularBuffer<Pending>(initialCapacity: 16)
        var waiter: UnsafeContinuation<MCSession.Event?, Never>?
        var finished = false
        /// The network thread's read whose event last woke the consumer.
        var wokenInReadPass = -1
    }

    private let state = Mutex(State())
    /// Removes the channel from its session once finished.
    private let onFinish: @Sendable (EventChannel) -> Void
    /// Whether this subscriber takes the peers' streams and files (an app's `events()`), so
    /// that the session accepts them; the library's own watchers (the browser model) do not.
    let takesChannels: Bool

    init(takesChannels: Bool = true, onFinish: @escaping @Sendable (EventChannel) -> Void) {
        self.takesChannels = takesChannels
        self.onFinish = onFinish
    }

    /// Events held back from a waiting consumer before it is woken all the same: bounds how long
    /// they wait and how many receipts they keep from their receive budgets.
    static let heldBackLimit = 64

    /// `readPass`: the number of the network thread's read that delivers the event. A consumer
    /// woken by one event of a read is not woken again for the others: they are held back until
    /// `wakeHeldBack()`, once the read is over, or until `heldBackLimit` wait. A burst of messages
    /// then costs the consumer a few thread wake-ups, not one every few messages, while a lone
    /// message still wakes it at once. Returns whether the event was held back from a waiting
    /// consumer.
    @discardableResult
    func yield(_ event: MCSession.Event, receipt: DeliveryReceipt = .none, readPass: Int? = nil) -> Bool {
        enum Outcome {
            case buffered, heldBack, dropped
            case handedOver(UnsafeContinuation<MCSession.Event?, Never>)
            case oldestHandedOver(UnsafeContinuation<MCSession.Event?, Never>, Pending)
        }
        let outcome = state.withLock { state -> Outcome in
            guard !state.finished else { return .dropped }
            guard let waiter = state.waiter else {
                state.buffer.append(Pending(event: event, receipt: receipt))
                return .buffered
            }
            if let readPass {
                // With a waiter, the buffer holds only events held back from it.
                if state.wokenInReadPass == readPass && state.buffer.count < Self.heldBackLimit {
                    state.buffer.append(Pending(event: event, receipt: receipt))
                    return .heldBack
                }
                state.wokenInReadPass = readPass
            }
            state.waiter = nil
            // A waiter found the buffer empty; only held-back events can have filled it since.
            if state.buffer.isEmpty { return .handedOver(waiter) }
            state.buffer.append(Pending(event: event, receipt: receipt))
            return .oldestHandedOver(waiter, state.buffer.removeFirst())
        }
        switch outcome {
        case .buffered: return false
        case .heldBack: return true
        case .dropped: receipt.consumed()
        case .handedOver(let waiter):
            receipt.consumed()
            waiter.resume(returning: event)
        case .oldestHandedOver(let waiter, let oldest): waiter.resume(returning: oldest.taken())
        }
        return false
    }

    /// The read is over: wakes a consumer that waits while events were held back.
    func wakeHeldBack() {
        let handOver = state.withLock { state -> (UnsafeContinuation<MCSession.Event?, Never>, Pending)? in
            guard let waiter = state.waiter, let oldest = state.buffer.popFirst() else { return nil }
            state.waiter = nil
            return (waiter, oldest)
        }
        guard let (waiter, oldest) = handOver else { return }
        waiter.resume(returning: oldest.taken())
    }

    /// Ends the stream: a waiting consumer gets nil, buffered events are dropped.
    func finish() {
        let (waiter, wasFinished, dropped) = state.withLock { state in
            defer {
                state.finished = true
                state.waiter = nil
                state.buffer.removeAll()
            }
            return (state.waiter, state.finished, Array(state.buffer))
        }
        for pending in dropped { pending.receipt.consumed() }
        waiter?.resume(returning: nil)
        if !wasFinished { onFinish(self) }
    }

    func next(isolation actor: isolated (any Actor)?) async -> MCSession.Event? {
        // The common case under load: an event is already waiting.
        if let ready = state.withLock({ $0.buffer.popFirst() }) { return ready.taken() }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: actor) { (continuation: UnsafeContinuation<MCSession.Event?, Never>) in
                let immediate = state.withLock { state -> MCSession.Event?? in
                    if let ready = state.buffer.popFirst() { return .some(ready.taken()) }
                    // Finished, cancelled, or another task is already waiting: end this iteration.
                    if state.finished || state.waiter != nil || Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            finish()
        }
    }

    var isFinished: Bool { state.withLock { $0.finished } }
}
