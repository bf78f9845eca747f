import Synchronization
import MultipeerProtocol

/// Sends queued from any thread and drained on the engine's event loop in batches, so a burst
/// of sends costs one hop onto the loop and one flush per socket rather than one per message.
/// Two arrays take turns (one filling, one being drained), so a drain allocates nothing.
final class SendQueue<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        /// The array the last drain emptied, kept for the next batch.
        var spare: [Item] = []
        var drainScheduled = false
    }

    /// A drained batch keeps its storage for reuse up to this many items.
    static var reusedCapacity: Int { 1_024 }

    private let state = Mutex(State())

    /// Queues an item; returns true when the caller must schedule a drain (none is pending).
    func enqueue(_ item: Item) -> Bool {
        state.withLock { state in
            state.items.append(item)
            defer { state.drainScheduled = true }
            return !state.drainScheduled
        }
    }

    /// Everything queued so far, oldest first; the next enqueue schedules a new drain. Hand the
    /// batch back with `recycle` once done with it.
    func takeAll() -> [Item] {
        state.withLock { state in
            state.drainScheduled = false
            let taken = state.items
            state.items = state.spare
            state.spare = []
            return taken
        }
    }

    /// Keeps a drained batch's storage for a later one.
    func recycle(_ batch: consuming [Item]) {
        var emptied = batch
        guard emptied.capacity <= Self.reusedCapacity else { return }
        emptied.removeAll(keepingCapacity: true)
        state.withLock { state in
            if state.spare.capacity == 0 { state.spare = emptied }
        }
    }
}
