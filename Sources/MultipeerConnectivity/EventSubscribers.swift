import MultipeerSession
import Synchronization
import MultipeerProtocol

/// A session's `events()` streams, and the wake-ups of their consumers during the engine's reads.
///
/// A consumer woken by one message of a read is not woken again for the others until the read
/// is over (or `EventChannel.heldBackLimit` of them wait): a burst of messages then costs it a
/// few thread wake-ups, not one every few messages, while a lone message still wakes it at once.
final class EventSubscribers: Sendable {
    private let channels = Mutex<[EventChannel]>([])
    /// Counts the engine's reads that delivered messages; touched on its network thread only.
    private let readPass = Atomic<Int>(0)
    /// A consumer waits while messages of the current read are held back from it.
    private let heldBack = Atomic<Bool>(false)

    /// The streams now, in the order they were made.
    var all: [EventChannel] { channels.withLock { $0 } }

    /// Whether a stream takes the peers' streams and files (an app's `events()`).
    var takeChannels: Bool { channels.withLock { $0.contains(where: \.takesChannels) } }

    func add(_ channel: EventChannel) { channels.withLock { $0.append(channel) } }

    func remove(_ channel: EventChannel) { channels.withLock { $0.removeAll { $0 === channel } } }

    /// Hands `event` to `streams`; `duringRead` only on the engine's network thread while it
    /// reads, which then reports the read's end (`readPassEnded`). Returns whether a waiting
    /// consumer was held back from it.
    @discardableResult
    func yield(_ event: MCSession.Event, to streams: [EventChannel], receipt: DeliveryReceipt, duringRead: Bool) -> Bool {
        let pass = duringRead ? readPass.load(ordering: .relaxed) : nil
        var heldBackNow = false
        for channel in streams where channel.yield(event, receipt: receipt, readPass: pass) {
            heldBackNow = true
        }
        if heldBackNow { heldBack.store(true, ordering: .relaxed) }
        return heldBackNow
    }

    /// The engine's read is over: its held-back messages go to their waiting consumers.
    func readPassEnded() {
        readPass.add(1, ordering: .relaxed)
        guard heldBack.exchange(false, ordering: .relaxed) else { return }
        for channel in all { channel.wakeHeldBack() }
    }
}
