import NIOCore
import Synchronization
import MultipeerProtocol

/// Bytes of one connection's messages handed to the application and not yet taken by it
/// (docs/PROTOCOL.md §7.6: a receiver limits MESSAGE memory by not reading). Past the limit the
/// connection stops reading; it reads again once the application has taken half of it.
/// Charged on the event loop, released from any thread.
/// Lock-free: it is charged and released once per message, from two threads.
package final class ReceiveBudget: Sendable {
    package let limit: Int
    private let held = Atomic<Int>(0)
    private let paused = Atomic<Bool>(false)
    private let resumeReading: @Sendable () -> Void

    init(limit: Int, resumeReading: @escaping @Sendable () -> Void) {
        self.limit = limit
        self.resumeReading = resumeReading
    }

    package var heldBytes: Int { held.load(ordering: .acquiring) }

    /// Whether a datagram of `bytes` may be delivered now (datagrams are dropped, not waited for).
    func hasRoom(for bytes: Int) -> Bool { held.load(ordering: .acquiring) + bytes <= limit }

    /// Counts `bytes` as delivered; returns true when the caller must pause reading now.
    func charge(_ bytes: Int) -> Bool {
        let total = held.add(bytes, ordering: .acquiringAndReleasing).newValue
        guard total > limit, paused.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return false }
        // A release that ran before the flag was set saw nothing to resume: if it left little
        // held, do not pause at all (no later release might come to resume reading).
        if held.load(ordering: .acquiring) <= limit / 2,
            paused.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
        {
            return false
        }
        return true
    }

    func release(_ bytes: Int) {
        let total = held.subtract(bytes, ordering: .acquiringAndReleasing).newValue
        if total <= limit / 2, paused.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged {
            resumeReading()
        }
    }
}

/// Hands a delivered message's bytes back to its budget once the application took it.
/// Call `consumed()` exactly once per receipt (or per share, for a shared receipt).
package struct DeliveryReceipt: Sendable {
    private let target: (any ReceiptTarget)?
    package let bytes: Int

    init(budget: ReceiveBudget?, bytes: Int) {
        target = budget
        self.bytes = bytes
    }

    private init(target: any ReceiptTarget, bytes: Int) {
        self.target = target
        self.bytes = bytes
    }

    /// Nothing to give back (a receipt for an event that charged nothing).
    package static let none = DeliveryReceipt(budget: nil, bytes: 0)

    package func consumed() { target?.release(bytes) }

    /// One receipt for each of `consumers` that all must take the message before it counts as taken.
    package func shared(among consumers: Int) -> DeliveryReceipt {
        guard consumers > 1, let target else { return self }
        return DeliveryReceipt(target: SharedReceipt(target: target, remaining: consumers), bytes: bytes)
    }
}

protocol ReceiptTarget: Sendable {
    func release(_ bytes: Int)
}

extension ReceiveBudget: ReceiptTarget {}

/// Counts down the consumers of one message; the last one releases its bytes.
private final class SharedReceipt: ReceiptTarget {
    let target: any ReceiptTarget
    let remaining: Atomic<Int>

    init(target: any ReceiptTarget, remaining: Int) {
        self.target = target
        self.remaining = Atomic(remaining)
    }

    func release(_ bytes: Int) {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { target.release(bytes) }
    }
}
