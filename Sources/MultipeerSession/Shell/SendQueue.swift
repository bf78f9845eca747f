import Synchronization

/// Sends queued from any thread and drained on the engine's event loop in batches, so a burst
/// of sends costs one hop onto the loop and one flush per socket rather than one per message.
final class SendQueue<Item: Sendable>: Sendable {
    private let state = Mutex<(items: [Item], drainScheduled: Bool)>(([], false))

    /// Queues an item; returns true when the caller must schedule a drain (none is pending).
    func enqueue(_ item: Item) -> Bool {
        state.withLock { state in
            state.items.append(item)
            defer { state.drainScheduled = true }
            return !state.drainScheduled
        }
    }

    /// Everything queued so far, oldest first; the next enqueue schedules a new drain.
    func takeAll() -> [Item] {
        state.withLock { state in
            state.drainScheduled = false
            defer { state.items.removeAll(keepingCapacity: true) }
            return state.items
        }
    }
}
