import NIOCore
import MultipeerProtocol

/// An event loop as a Swift task executor. A task that prefers it runs its nonisolated code,
/// including every resumption after an `await`, on the loop's thread, so events produced on the
/// loop reach it and its sends leave through the loop without a thread hop. (Resuming a plain
/// task always goes through the global executor first: two thread switches per event.)
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
package final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
