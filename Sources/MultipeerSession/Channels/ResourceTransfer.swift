import MultipeerWire
import Synchronization
import MultipeerProtocol

/// One resource transfer, outgoing or incoming, as the application sees it: its progress in
/// bytes, a way to cancel it (which stops it on both sides), and its outcome. Thread-safe.
package final class ResourceTransfer: Sendable {
    package enum Direction: Sendable { case outgoing, incoming }

    package let name: String
    package let peer: WirePeerID
    package let size: UInt64
    package let direction: Direction

    private struct State {
        var completed: UInt64 = 0
        var outcome: Result<String?, TransferError>?
        var progressObserver: (@Sendable (UInt64) -> Void)?
        var waiters: [UnsafeContinuation<Result<String?, TransferError>, Never>] = []
        var cancelHandler: (@Sendable () -> Void)?
        var cancelRequested = false
    }

    private let state = Mutex(State())

    init(name: String, peer: WirePeerID, size: UInt64, direction: Direction) {
        self.name = name
        self.peer = peer
        self.size = size
        self.direction = direction
    }

    /// Bytes sent (outgoing) or stored (incoming) so far, counting a resumed prefix.
    package var completedBytes: UInt64 { state.withLock { $0.completed } }

    /// The outcome once known: the received file's path (incoming), nil (outgoing), or why it failed.
    package var outcome: Result<String?, TransferError>? { state.withLock { $0.outcome } }

    /// Called with the byte count as it grows, from the engine's threads.
    package func setProgressObserver(_ observer: (@Sendable (UInt64) -> Void)?) {
        state.withLock { $0.progressObserver = observer }
    }

    /// Stops the transfer on both sides; the outcome becomes `cancelled`. Does nothing once it ended.
    package func cancel() {
        let handler = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.outcome == nil else { return nil }
            state.cancelRequested = true
            return state.cancelHandler
        }
        handler?()
    }

    /// Waits for the outcome.
    package func result() async -> Result<String?, TransferError> {
        await withUnsafeContinuation { continuation in
            let now = state.withLock { state -> Result<String?, TransferError>? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }

    // MARK: The engine's side

    func setCancelHandler(_ handler: @escaping @Sendable () -> Void) {
        let cancelNow = state.withLock { state -> Bool in
            state.cancelHandler = handler
            return state.cancelRequested && state.outcome == nil
        }
        if cancelNow { handler() }
    }

    func progressed(to bytes: UInt64) {
        let observer = state.withLock { state -> (@Sendable (UInt64) -> Void)? in
            guard bytes > state.completed else { return nil }
            state.completed = bytes
            return state.progressObserver
        }
        observer?(bytes)
    }

    /// Records the outcome (the first one counts); returns false when one was already recorded.
    @discardableResult
    func finished(_ outcome: Result<String?, TransferError>) -> Bool {
        let waiters = state.withLock { state -> [UnsafeContinuation<Result<String?, TransferError>, Never>]? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            state.cancelHandler = nil
            defer { state.waiters = [] }
            return state.waiters
        }
        guard let waiters else { return false }
        for waiter in waiters { waiter.resume(returning: outcome) }
        return true
    }
}
