import Synchronization
import MultipeerProtocol

/// Runs async operations one at a time, in the order they were submitted (start, stop, start
/// called in a burst from any threads must not overlap or overtake each other).
public final class OperationSequencer: Sendable {
    private let last = Mutex<Task<Void, Never>?>(nil)

    public init() {}

    public func run<Result: Sendable>(_ operation: @escaping @Sendable () async -> Result) async -> Result {
        let task = last.withLock { previous -> Task<Result, Never> in
            let before = previous
            let task = Task {
                await before?.value
                return await operation()
            }
            previous = Task { _ = await task.value }
            return task
        }
        return await task.value
    }

    /// `run` for an operation that throws one error type.
    public func runThrowing<Failure: Error>(_ operation: @escaping @Sendable () async throws(Failure) -> Void) async throws(Failure) {
        let outcome = await run { () async -> Result<Void, Failure> in
            do throws(Failure) {
                try await operation()
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try outcome.get()
    }

    /// Submits without waiting (Apple's fire-and-forget start and stop calls).
    public func submit(_ operation: @escaping @Sendable () async -> Void) {
        last.withLock { previous in
            let before = previous
            previous = Task {
                await before?.value
                await operation()
            }
        }
    }
}
