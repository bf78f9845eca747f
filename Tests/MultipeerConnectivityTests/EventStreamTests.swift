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

    /// A consumer woken by the first message of a read is not woken again for each of the others,
    /// even when it waits again at once: they are held back until the read ends, then taken in
    /// one wake-up. A lone message of the next read wakes it at once.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aReadWakesAWaitingConsumerOnceAndOnceMoreWhenItEnds() async throws {
        let subscribers = EventSubscribers()
        let channel = EventChannel { _ in }
        subscribers.add(channel)
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let executor = WatchedExecutor()
        let taken = Counter()
        let consumer = Task(executorPreference: executor) {
            var seen: [Int] = []
            for await event in stream {
                seen.append(Self.index(of: event)!)
                taken.set(seen.count)
                if seen.count == 21 { break }
            }
            return seen
        }
        defer { consumer.cancel() }
        #expect(try await eventually { executor.isIdle })
        let jobsBefore = executor.enqueuedJobs
        subscribers.yield(Self.data(0), to: [channel], receipt: .none, duringRead: true)
        // The consumer took what it was woken for and waits again.
        #expect(try await eventually { taken.value == 1 && executor.isIdle })
        for index in 1..<20 {
            #expect(subscribers.yield(Self.data(index), to: [channel], receipt: .none, duringRead: true))
        }
        // Its executor ran everything it was given, and was given one resumption.
        #expect(executor.isIdle)
        #expect(taken.value == 1)
        #expect(executor.enqueuedJobs == jobsBefore + 1)
        subscribers.readPassEnded()
        #expect(try await eventually { taken.value == 20 && executor.isIdle })
        #expect(executor.enqueuedJobs == jobsBefore + 2)
        subscribers.yield(Self.data(20), to: [channel], receipt: .none, duringRead: true)
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == Array(0..<21))
    }

    /// An event from outside a read (a state change, a stream) wakes a consumer at once, and
    /// after the messages held back before it: order is kept.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func anEventOutsideAReadComesAfterTheMessagesHeldBackBeforeIt() async throws {
        let subscribers = EventSubscribers()
        let channel = EventChannel { _ in }
        subscribers.add(channel)
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let executor = WatchedExecutor()
        let taken = Counter()
        let consumer = Task(executorPreference: executor) {
            var seen: [Int] = []
            for await event in stream {
                seen.append(Self.index(of: event)!)
                taken.set(seen.count)
                if seen.count == 4 { break }
            }
            return seen
        }
        defer { consumer.cancel() }
        #expect(try await eventually { executor.isIdle })
        subscribers.yield(Self.data(0), to: [channel], receipt: .none, duringRead: true)
        #expect(try await eventually { taken.value == 1 && executor.isIdle })
        #expect(subscribers.yield(Self.data(1), to: [channel], receipt: .none, duringRead: true))
        #expect(subscribers.yield(Self.data(2), to: [channel], receipt: .none, duringRead: true))
        subscribers.yield(Self.data(3), to: [channel], receipt: .none, duringRead: false)
        // No read end comes: the event outside the read is what wakes the consumer.
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == [0, 1, 2, 3])
    }

    /// Held-back messages keep their receipts from the receive budget and wait for the read's
    /// end: past `heldBackLimit` of them the consumer is woken all the same, read end or not.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func aConsumerIsWokenOnceHeldBackMessagesReachTheLimit() async throws {
        let subscribers = EventSubscribers()
        let channel = EventChannel { _ in }
        subscribers.add(channel)
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let executor = WatchedExecutor()
        let taken = Counter()
        let limit = EventChannel.heldBackLimit
        let consumer = Task(executorPreference: executor) {
            var seen: [Int] = []
            for await event in stream {
                seen.append(Self.index(of: event)!)
                taken.set(seen.count)
                if seen.count == limit + 2 { break }
            }
            return seen
        }
        defer { consumer.cancel() }
        #expect(try await eventually { executor.isIdle })
        subscribers.yield(Self.data(0), to: [channel], receipt: .none, duringRead: true)
        #expect(try await eventually { taken.value == 1 && executor.isIdle })
        for index in 1...limit {
            #expect(subscribers.yield(Self.data(index), to: [channel], receipt: .none, duringRead: true))
        }
        #expect(!subscribers.yield(Self.data(limit + 1), to: [channel], receipt: .none, duringRead: true))
        // No read end: the limit alone woke the consumer for everything.
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == Array(0...(limit + 1)))
    }

    /// Each stream is held back on its own: a read's end wakes the one that waits, and a stream
    /// whose consumer was busy (or had not started) finds every message buffered, in order.
    @available(macOS 15.0, iOS 18.0, watchOS 11.0, tvOS 18.0, *)
    @Test func streamsAreHeldBackEachOnItsOwn() async throws {
        let subscribers = EventSubscribers()
        let waiting = EventChannel { _ in }
        let busy = EventChannel { _ in }
        subscribers.add(waiting)
        subscribers.add(busy)
        let waitingStream = MCSession.Events(subscription: EventSubscription(channel: waiting))
        let busyStream = MCSession.Events(subscription: EventSubscription(channel: busy))
        let executor = WatchedExecutor()
        let taken = Counter()
        let consumer = Task(executorPreference: executor) {
            var seen: [Int] = []
            for await event in waitingStream {
                seen.append(Self.index(of: event)!)
                taken.set(seen.count)
                if seen.count == 10 { break }
            }
            return seen
        }
        defer { consumer.cancel() }
        #expect(try await eventually { executor.isIdle })
        subscribers.yield(Self.data(0), to: subscribers.all, receipt: .none, duringRead: true)
        #expect(try await eventually { taken.value == 1 && executor.isIdle })
        for index in 1..<10 { subscribers.yield(Self.data(index), to: subscribers.all, receipt: .none, duringRead: true) }
        #expect(taken.value == 1)
        subscribers.readPassEnded()
        #expect(try await withDeadline(seconds: 10) { await consumer.value } == Array(0..<10))
        let late = try await withDeadline(seconds: 10) {
            var seen: [Int] = []
            for await event in busyStream {
                seen.append(Self.index(of: event)!)
                if seen.count == 10 { break }
            }
            return seen
        }
        #expect(late == Array(0..<10))
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
