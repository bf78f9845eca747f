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

    @Test func eventsYieldedBeforeAndDuringIterationArriveInOrder() async {
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
        for index in 100..<200 {
            channel.yield(Self.data(index))
            if index % 10 == 0 { await Task.yield() }
        }
        #expect(await consumer.value == Array(0..<200))
    }

    @Test func cancellingTheIteratingTaskEndsTheLoopAndUnsubscribes() async throws {
        let finished = FinishedFlag()
        let channel = EventChannel { _ in finished.set() }
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let consumer = Task {
            var count = 0
            for await _ in stream { count += 1 }
            return count
        }
        channel.yield(Self.data(1))
        try await Task.sleep(for: .milliseconds(50))
        consumer.cancel()
        #expect(await consumer.value == 1)
        #expect(finished.isSet)
        #expect(channel.isFinished)
        // Later events are not buffered for nobody.
        channel.yield(Self.data(2))
        var iterator = stream.makeAsyncIterator()
        #expect(await iterator.next() == nil)
    }

    @Test func aSecondConcurrentIteratorGetsNil() async throws {
        let channel = EventChannel { _ in }
        let stream = MCSession.Events(subscription: EventSubscription(channel: channel))
        let first = Task { () -> Int? in
            var iterator = stream.makeAsyncIterator()
            return Self.index(of: await iterator.next())
        }
        try await Task.sleep(for: .milliseconds(50))  // the first task is now waiting
        var second = stream.makeAsyncIterator()
        #expect(await second.next() == nil)
        channel.yield(Self.data(7))
        #expect(await first.value == 7)
    }

    @Test func droppingAStreamUnsubscribesItFromTheSession() {
        let session = MCSession(peer: MCPeerID(displayName: "solo"))
        var stream: MCSession.Events? = session.events()
        #expect(session.subscriberCount == 1)
        _ = stream
        stream = nil
        #expect(session.subscriberCount == 0)
    }

    @Test func aLoopEndsWhenItsSessionIsDeallocated() async throws {
        var session: MCSession? = MCSession(peer: MCPeerID(displayName: "short-lived"))
        let stream = session!.events()
        let consumer = Task {
            for await _ in stream {}
            return true
        }
        try await Task.sleep(for: .milliseconds(50))
        session = nil
        #expect(try await withTimeout(seconds: 10) { await consumer.value })
    }
}

final class FinishedFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
