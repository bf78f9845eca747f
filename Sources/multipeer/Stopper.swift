import Dispatch
import Foundation
import Synchronization

/// How a command is asked to end: a command, end of input, or a signal. Ctrl-C once ends
/// cleanly (peers get a goodbye); twice ends at once.
final class Stopper: Sendable {
    enum Reason: Sendable, Equatable {
        case quit, endOfInput, interrupted
    }

    private let stream: AsyncStream<Reason>
    private let continuation: AsyncStream<Reason>.Continuation
    private let requested = Mutex<Reason?>(nil)
    private let sources = Mutex<[SignalSource]>([])

    /// Dispatch sources are thread-safe but not marked Sendable; kept only to keep them alive.
    private struct SignalSource: @unchecked Sendable {
        let source: any DispatchSourceSignal
    }

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: Reason.self, bufferingPolicy: .bufferingOldest(1))
    }

    func request(_ reason: Reason) {
        let first = requested.withLock { requested in
            defer { if requested == nil { requested = reason } }
            return requested == nil
        }
        if first { continuation.yield(reason) }
    }

    /// Waits for the first request.
    func wait() async -> Reason {
        for await reason in stream { return reason }
        return requested.withLock { $0 } ?? .quit
    }

    var reason: Reason? { requested.withLock { $0 } }

    /// SIGINT and SIGTERM request a stop; a second SIGINT exits at once.
    func catchSignals() {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                guard let self else { return }
                if self.reason != nil && number == SIGINT { exit(AppFailure.Kind.interrupted.rawValue) }
                self.request(.interrupted)
            }
            source.resume()
            sources.withLock { $0.append(SignalSource(source: source)) }
        }
    }
}
