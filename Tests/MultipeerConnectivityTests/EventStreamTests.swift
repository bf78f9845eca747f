@testable import MultipeerConnectivity
import Foundation
import Synchronization
import MultipeerTestSupport
import Testing

/// `MCSession.events()`: the stream's own rules, apart from what flows through it.
@Suite("MCSession event streams")
struct EventStreamTests {
    static func data(_ index: Int) -> MCSession.Event { .dataReceived(Data([UInt8(index)]), from: MCPeerID(displayName: "p")) }

    static func index(of event: MCSession.Event?) -> Int? {
        guard case .dataReceived(let data, _)? = event else { return nil }
        return Int(data[data.startIndex])
    }

    @Test func eventsYieldedBeforeAndDuringIterationArriveInOrder() async throws {
        let channel = EventChannel { _ in }
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        for index in 0..<100 { channel.yield(Self.data(index)) }
        let consumer = Task {
            var seen: [Int] = []
            for await event in stream {
                seen.append(Self.index(of: event)!)
                if seen.count == 200 { break }
            }
            return seen
        }
        defer { consumer.cancel() }
        for index in 100..<200 {
            channel.yield(Self.data(index))
            if index % 10 == 0 { await Task.yield() }
        }
        // A lost event would leave the loop waiting for its 200th: the deadline turns that into a failure.
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == Array(0..<200))
    }

    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func cancellingTheIteratingTaskEndsTheLoopAndUnsubscribes() async throws {
        let finished = FinishedFlag()
        let channel = EventChannel { _ in finished.set() }
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let executor = WatchedExecutor()
        let taken = Counter()
        let consumer = Task(executorPreference: executor) {
            var count = 0
            for await _ in stream {
                count += 1
                taken.set(count)
            }
            return count
        }
        channel.yield(Self.data(1))
        // The loop took the event and is parked in next() for another: its executor has nothing to run.
        #expect(try await eventually { taken.value == 1 && executor.isIdle })
        consumer.cancel()
        // A loop that ignored the cancellation would wait for ever: the deadline makes that a failure.
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == 1)
        #expect(finished.isSet)
        #expect(channel.isFinished)
        // Later events are not buffered for nobody.
        channel.yield(Self.data(2))
        #expect(try await withDeadline(seconds: 10) {
            var iterator = stream.makeAsyncIterator()
            return await iterator.next() == nil
        })
    }

    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aSecondConcurrentIteratorGetsNil() async throws {
        let channel = EventChannel { _ in }
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let executor = WatchedExecutor()
        let first = Task(executorPreference: executor) { () -> Int? in
            var iterator = stream.makeAsyncIterator()
            return Self.index(of: await iterator.next())
        }
        defer { first.cancel() }
        // The first task is parked in next(): it ran, cannot have finished without an event, and its
        // executor has nothing left to run.
        #expect(try await eventually { executor.isIdle })
        // A second iterator that waited instead of getting nil would hang: bounded.
        #expect(try await withDeadline(seconds: 10) {
            var second = stream.makeAsyncIterator()
            return await second.next() == nil
        })
        channel.yield(Self.data(7))
        #expect(try await withDeadline(seconds: 10) { await first.value } == 7)
    }

    /// A stream subscribed to `subscribers`, and its channel.
    static func subscribed(to subscribers: EventSubscribers) -> (EventChannel, MCSession.Events) {
        let channel = EventChannel { _ in }
        subscribers.add(channel)
        return (channel, MCSession.Events(subscription: EventSubscription(channel: channel)))
    }

    /// Yields message 0 during a read to `subscribers`' streams and waits until `consumer` took it
    /// and waits again: the read has woken it once.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    static func wakeOnce(_ consumer: WatchedConsumer, through subscribers: EventSubscribers) async throws {
        #expect(try await eventually { consumer.executor.isIdle })
        subscribers.yield(data(0), to: subscribers.all, receipt: .none, duringRead: true)
        #expect(try await eventually { consumer.taken.value == 1 && consumer.executor.isIdle })
    }

    /// A consumer woken by the first message of a read is not woken again for each of the others,
    /// even when it waits again at once: they are held back until the read ends, then taken in
    /// one wake-up. A lone message of the next read wakes it at once.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aReadWakesAWaitingConsumerOnceAndOnceMoreWhenItEnds() async throws {
        let subscribers = EventSubscribers()
        let (channel, stream) = Self.subscribed(to: subscribers)
        let consumer = WatchedConsumer(stream, taking: 21)
        defer { consumer.task.cancel() }
        #expect(try await eventually { consumer.executor.isIdle })
        let jobsBefore = consumer.executor.enqueuedJobs
        try await Self.wakeOnce(consumer, through: subscribers)
        for index in 1..<20 {
            #expect(subscribers.yield(Self.data(index), to: [channel], receipt: .none, duringRead: true))
        }
        // Its executor ran everything it was given, and was given one resumption.
        #expect(consumer.executor.isIdle)
        #expect(consumer.taken.value == 1)
        #expect(consumer.executor.enqueuedJobs == jobsBefore + 1)
        subscribers.readPassEnded()
        #expect(try await eventually { consumer.taken.value == 20 && consumer.executor.isIdle })
        #expect(consumer.executor.enqueuedJobs == jobsBefore + 2)
        #expect(!subscribers.yield(Self.data(20), to: [channel], receipt: .none, duringRead: true))
        #expect(try await withDeadline(seconds: 10) { await consumer.task.value } == Array(0..<21))
    }

    /// An event from outside a read (a state change, a stream) wakes a consumer at once, and
    /// after the messages held back before it: order is kept.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func anEventOutsideAReadComesAfterTheMessagesHeldBackBeforeIt() async throws {
        let subscribers = EventSubscribers()
        let (channel, stream) = Self.subscribed(to: subscribers)
        let consumer = WatchedConsumer(stream, taking: 4)
        defer { consumer.task.cancel() }
        try await Self.wakeOnce(consumer, through: subscribers)
        #expect(subscribers.yield(Self.data(1), to: [channel], receipt: .none, duringRead: true))
        #expect(subscribers.yield(Self.data(2), to: [channel], receipt: .none, duringRead: true))
        subscribers.yield(Self.data(3), to: [channel], receipt: .none, duringRead: false)
        // No read end comes: the event outside the read is what wakes the consumer.
        #expect(try await withDeadline(seconds: 10) { await consumer.task.value } == [0, 1, 2, 3])
    }

    /// Held-back messages keep their receipts from the receive budget and wait for the read's
    /// end: past `heldBackLimit` of them the consumer is woken all the same, read end or not.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aConsumerIsWokenOnceHeldBackMessagesReachTheLimit() async throws {
        let subscribers = EventSubscribers()
        let (channel, stream) = Self.subscribed(to: subscribers)
        let limit = EventChannel.heldBackLimit
        let consumer = WatchedConsumer(stream, taking: limit + 2)
        defer { consumer.task.cancel() }
        try await Self.wakeOnce(consumer, through: subscribers)
        for index in 1...limit {
            #expect(subscribers.yield(Self.data(index), to: [channel], receipt: .none, duringRead: true))
        }
        #expect(!subscribers.yield(Self.data(limit + 1), to: [channel], receipt: .none, duringRead: true))
        // No read end: the limit alone woke the consumer for everything.
        #expect(try await withDeadline(seconds: 10) { await consumer.task.value } == Array(0...(limit + 1)))
    }

    /// Each stream is held back on its own: a read's end wakes the one that waits, and a stream
    /// whose consumer was busy (or had not started) finds every message buffered, in order.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func streamsAreHeldBackEachOnItsOwn() async throws {
        let subscribers = EventSubscribers()
        let (_, waitingStream) = Self.subscribed(to: subscribers)
        let (_, busyStream) = Self.subscribed(to: subscribers)
        let consumer = WatchedConsumer(waitingStream, taking: 10)
        defer { consumer.task.cancel() }
        try await Self.wakeOnce(consumer, through: subscribers)
        for index in 1..<10 { subscribers.yield(Self.data(index), to: subscribers.all, receipt: .none, duringRead: true) }
        #expect(consumer.taken.value == 1)
        subscribers.readPassEnded()
        #expect(try await withDeadline(seconds: 10) { await consumer.task.value } == Array(0..<10))
        let late = WatchedConsumer(busyStream, taking: 10)
        #expect(try await withDeadline(seconds: 10) { await late.task.value } == Array(0..<10))
    }

    @Test func droppingAStreamUnsubscribesItFromTheSession() {
        let session = MCSession(peer: MCPeerID(displayName: "solo"))
        var stream: MCSession.Events? = session.events()
        #expect(session.subscriberCount == 1)
        _ = stream
        stream = nil
        #expect(session.subscriberCount == 0)
    }

    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aLoopEndsWhenItsSessionIsDeallocated() async throws {
        var session: MCSession? = MCSession(peer: MCPeerID(displayName: "short-lived"))
        let stream = session!.events()
        let executor = WatchedExecutor()
        let consumer = Task(executorPreference: executor) {
            for await _ in stream {}
            return true
        }
        defer { consumer.cancel() }
        // The loop is parked waiting for an event before the session goes.
        #expect(try await eventually { executor.isIdle })
        session = nil
        #expect(try await withDeadline(seconds: 10) { await consumer.value })
    }
}

final class FinishedFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func set(_ value: Int) { count.withLock { $0 = value } }
    var value: Int { count.withLock { $0 } }
}

/// A task on a watched executor that takes `count` data events from a stream and returns their
/// indices, counting them as it goes.
@available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
struct WatchedConsumer {
    let executor = WatchedExecutor()
    let taken = Counter()
    let task: Task<[Int], Never>

    init(_ stream: MCSession.Events, taking count: Int) {
        let taken = taken
        task = Task(executorPreference: executor) {
            var seen: [Int] = []
            for await event in stream {
                seen.append(EventStreamTests.index(of: event) ?? -1)
                taken.set(seen.count)
                if seen.count == count { break }
            }
            return seen
        }
    }
}
