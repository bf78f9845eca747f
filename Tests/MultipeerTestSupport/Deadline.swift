import Dispatch
import Synchronization

/// What `withDeadline` throws when its body has not finished in time.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public let seconds: Double
    public var description: String { "no result within \(seconds) s" }
}

/// What `firstMatch` throws when its sequence ends before anything matched.
public struct SequenceEndedWithoutMatch: Error, CustomStringConvertible {
    public var description: String { "the sequence ended before an element matched" }
}

/// Runs `body` and returns what it returns, or throws `DeadlineExceeded` once `seconds` have
/// passed. The wait ends at the deadline even when `body` ignores cancellation (an `await` on
/// another task's value, a loop over a stream that never ends): the body is then cancelled and
/// left behind, and the test fails instead of hanging. (A task group would wait for it.)
public func withDeadline<T: Sendable>(
    seconds: Double, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            race.start(continuation, seconds: seconds, body)
        }
    } onCancel: {
        race.cancelBody()
    }
}

/// Iterates `sequence` until `match` returns a value and returns it; throws `DeadlineExceeded`
/// after `seconds`, and `SequenceEndedWithoutMatch` if the sequence ends first.
public func firstMatch<S: AsyncSequence & Sendable, R: Sendable>(
    in sequence: S, seconds: Double = 10, _ match: @escaping @Sendable (S.Element) -> R?
) async throws -> R {
    try await withDeadline(seconds: seconds) {
        for try await element in sequence {
            if let result = match(element) { return result }
        }
        throw SequenceEndedWithoutMatch()
    }
}

/// The continuation of one `withDeadline` call, resumed once by whichever ends first.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var body: Task<Void, Never>?
        var timer: Task<Void, Never>?
        var cancelled = false
    }

    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, seconds: Double, _ body: @escaping @Sendable () async throws -> T) {
        state.withLock { $0.continuation = continuation }
        let work = Task {
            do {
                self.finish(.success(try await body()))
            } catch {
                self.finish(.failure(error))
            }
        }
        let timer = Task {
            // Cancelled when the body finishes first; only a deadline that really passed fails.
            guard (try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))) != nil else { return }
            self.finish(.failure(DeadlineExceeded(seconds: seconds)))
        }
        let (finished, cancelled) = state.withLock { state in
            state.body = work
            state.timer = timer
            return (state.continuation == nil, state.cancelled)
        }
        if finished { timer.cancel() }
        if cancelled { work.cancel() }
    }

    /// The waiting task was cancelled: pass that on to the body.
    func cancelBody() {
        let work = state.withLock { state in
            state.cancelled = true
            return state.body
        }
        work?.cancel()
    }

    private func finish(_ result: Result<T, any Error>) {
        let (continuation, work, timer) = state.withLock { state in
            defer { state.continuation = nil }
            return (state.continuation, state.body, state.timer)
        }
        guard let continuation else { return }
        timer?.cancel()
        if case .failure(let error) = result, error is DeadlineExceeded { work?.cancel() }
        continuation.resume(with: result)
    }
}

/// A task executor on a serial queue of its own that knows when it has run everything it was
/// given. A task that prefers it and is found idle has suspended, so a test can tell that a
/// consumer is parked in `next()` without sleeping and hoping: once the executor is idle, the
/// task is either finished or waiting for something from outside.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
public final class WatchedExecutor: TaskExecutor, Sendable {
    private let queue = DispatchQueue(label: "WatchedExecutor")
    private let jobs = Mutex((enqueued: 0, finished: 0))

    public init() {}

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.enqueued += 1 }
        queue.async {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
            self.jobs.withLock { $0.finished += 1 }
        }
    }

    /// Jobs enqueued so far: each is a resumption of a task that preferred this executor.
    public var enqueuedJobs: Int { jobs.withLock { $0.enqueued } }

    /// At least one job ran, and every job enqueued so far has run to its end.
    public var isIdle: Bool { jobs.withLock { $0.enqueued > 0 && $0.enqueued == $0.finished } }
}
