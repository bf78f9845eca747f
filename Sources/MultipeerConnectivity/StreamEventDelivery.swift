import Foundation
import MultipeerProtocol

/// Delivers `Stream` delegate events the way Apple's streams do: on each run loop the stream is
/// scheduled in, in the scheduled modes, never on the thread that produced them. Level-triggered
/// like a socket stream: an event still true after the app handled it (space or bytes left) is
/// sent again, so pumping code that handles one chunk per event never stalls. At most one event
/// of each kind waits at a time.
final class StreamEventDelivery: @unchecked Sendable {
    // @unchecked: the run-loop list and pending set are behind the lock; Stream and RunLoop are
    // not Sendable in corelibs-foundation, but are only touched on their own run loops.
    private struct State {
        var runLoops: [(runLoop: RunLoop, mode: RunLoop.Mode)] = []
        var pending: Set<UInt> = []
        /// Events posted before any run loop was scheduled (a stream opened, then scheduled):
        /// delivered once one is, as Apple's streams report their state when scheduled.
        var unscheduled: [(event: Stream.Event, stillTrue: @Sendable () -> Bool)] = []
    }

    private let lock = NSLock()
    private var state = State()
    /// Set once, right after the stream is made; read on its run loops.
    weak var stream: Stream?

    var isScheduled: Bool { lock.withLock { !state.runLoops.isEmpty } }

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let waiting = lock.withLock { () -> [(event: Stream.Event, stillTrue: @Sendable () -> Bool)] in
            if !state.runLoops.contains(where: { $0.runLoop === runLoop && $0.mode == mode }) { state.runLoops.append((runLoop, mode)) }
            defer { state.unscheduled = [] }
            return state.unscheduled
        }
        for (event, stillTrue) in waiting { post(event, stillTrue: stillTrue) }
    }

    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.withLock { state.runLoops.removeAll { $0.runLoop === runLoop && $0.mode == mode } }
    }

    /// Queues `event` for the delegate; `stillTrue` is asked when it is delivered, so a condition
    /// that went away meanwhile (bytes read by a poller) is not reported.
    func post(_ event: Stream.Event, stillTrue: @escaping @Sendable () -> Bool = { true }) {
        let targets = lock.withLock { () -> [(RunLoop, RunLoop.Mode)] in
            guard !state.runLoops.isEmpty else {
                if !state.unscheduled.contains(where: { $0.event == event }) { state.unscheduled.append((event, stillTrue)) }
                return []
            }
            guard state.pending.insert(event.rawValue).inserted else { return [] }
            return state.runLoops.map { ($0.runLoop, $0.mode) }
        }
        guard let (runLoop, mode) = targets.first else { return }
        let box = UncheckedBox(self)
        // A timer added from another thread wakes the run loop (a performed block would not).
        let timer = Timer(timeInterval: 0, repeats: false) { _ in box.value.deliver(event, stillTrue: stillTrue) }
        runLoop.add(timer, forMode: mode)
    }

    private func deliver(_ event: Stream.Event, stillTrue: () -> Bool) {
        lock.withLock { _ = state.pending.remove(event.rawValue) }
        guard let stream, stillTrue() else { return }
        stream.delegate?.stream(stream, handle: event)
    }
}

/// Carries a value across a closure that corelibs-foundation requires to be Sendable.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
