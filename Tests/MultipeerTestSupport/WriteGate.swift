import Dispatch
import Synchronization

/// Holds the receiver's writes at and after one offset until opened: a cut at a chosen point.
public final class WriteGate: Sendable {
    public let offset: UInt64
    private let state = Mutex((reached: false, open: false))
    private let opened = DispatchSemaphore(value: 0)

    public init(at offset: UInt64) { self.offset = offset }

    public var reached: Bool { state.withLock { $0.reached } }

    /// On the store's thread, before a write at `position`.
    public func pass(_ position: UInt64) {
        guard position >= offset else { return }
        let wait = state.withLock { state -> Bool in
            state.reached = true
            return !state.open
        }
        // Bounded, so a test that fails early never leaves a pool thread stuck.
        if wait { _ = opened.wait(timeout: .now() + 10) }
    }

    public func open() {
        state.withLock { $0.open = true }
        opened.signal()
    }
}
