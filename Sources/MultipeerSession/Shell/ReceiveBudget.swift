import NIOCore
import Synchronization

/// Bytes of one connection's messages handed to the application and not yet taken by it
/// (docs/PROTOCOL.md §7.6: a receiver limits MESSAGE memory by not reading). Past the limit the
/// connection stops reading; it reads again once the application has taken half of it.
/// Charged on the event loop, released from any thread.
public final class ReceiveBudget: Sendable {
    public let limit: Int
    private let state = Mutex<(held: Int, paused: Bool)>((0, false))
    private let resumeReading: @Sendable () -> Void

    init(limit: Int, resumeReading: @escaping @Sendable () -> Void) {
        self.limit = limit
        self.resumeReading = resumeReading
    }

    public var heldBytes: Int { state.withLock { $0.held } }

    /// Whether a datagram of `bytes` may be delivered now (datagrams are dropped, not waited for).
    func hasRoom(for bytes: Int) -> Bool { state.withLock { $0.held + bytes <= limit } }

    /// Counts `bytes` as delivered; returns true when the caller must pause reading now.
    func charge(_ bytes: Int) -> Bool {
        state.withLock { state in
            state.held += bytes
            guard state.held > limit, !state.paused else { return false }
            state.paused = true
            return true
        }
    }

    func release(_ bytes: Int) {
        let resume = state.withLock { state -> Bool in
            state.held -= bytes
            guard state.paused, state.held <= limit / 2 else { return false }
            state.paused = false
            return true
        }
        if resume { resumeReading() }
    }
}

/// Hands a delivered message's bytes back to its budget once the application took it.
/// Call `consumed()` exactly once per receipt (or per share, for a shared receipt).
public struct DeliveryReceipt: Sendable {
    private let target: (any ReceiptTarget)?
    public let bytes: Int

    init(budget: ReceiveBudget?, bytes: Int) {
        target = budget
        self.bytes = bytes
    }

    private init(target: any ReceiptTarget, bytes: Int) {
        self.target = target
        self.bytes = bytes
    }

    /// Nothing to give back (a receipt for an event that charged nothing).
    public static let none = DeliveryReceipt(budget: nil, bytes: 0)

    public func consumed() { target?.release(bytes) }

    /// One receipt for each of `consumers` that all must take the message before it counts as taken.
    public func shared(among consumers: Int) -> DeliveryReceipt {
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
