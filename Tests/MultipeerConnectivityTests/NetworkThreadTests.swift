import Foundation
import MultipeerConnectivity
import MultipeerTestSupport
import NIOPosix
import Synchronization
import Testing

/// Taking events and sending on the session's own network thread (`taskExecutor`, `executor`).
@Suite("MCSession on its network thread", .serialized)
struct NetworkThreadTests {
    static let pki = try! TestPKI()

    static func connectedPair() async throws -> (alice: MCSession, bob: MCSession) {
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try pki.peer("alice"), configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try pki.peer("bob"), configuration: .loopbackOnly)
        let data = try await alice.nearbyConnectionData(forPeer: bob.myPeerID)
        bob.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
        #expect(try await eventually { alice.connectedPeers.count == 1 && bob.connectedPeers.count == 1 })
        return (alice, bob)
    }

    /// Both ends run on their network threads: every event is handled on an event loop thread,
    /// and a ping-pong of 200 messages completes in order.
    @Test(arguments: [MCSessionSendDataMode.reliable, .unreliable])
    func tasksPreferringTheTaskExecutorRunOnTheNetworkThread(mode: MCSessionSendDataMode) async throws {
        let (alice, bob) = try await Self.connectedPair()
        let offThread = OffThreadCount()
        let aliceEvents = alice.events()
        let bobEvents = bob.events()
        let bobPeer = bob.myPeerID
        let alicePeer = alice.myPeerID
        let echo = Task(executorPreference: alice.taskExecutor) {
            for await event in aliceEvents {
                offThread.check()
                if case .dataReceived(let data, _) = event { try? alice.send(data, toPeers: [bobPeer], with: mode) }
            }
        }
        defer { echo.cancel() }
        let echoed = try await withDeadline(seconds: 20) {
            await Task(executorPreference: bob.taskExecutor) {
                var echoed: [Data] = []
                var iterator = bobEvents.makeAsyncIterator()
                for index in 0..<200 {
                    let probe = Data("probe \(index)".utf8)
                    try? bob.send(probe, toPeers: [alicePeer], with: mode)
                    while let event = await iterator.next(isolation: #isolation) {
                        offThread.check()
                        if case .dataReceived(let data, _) = event {
                            echoed.append(data)
                            break
                        }
                    }
                }
                return echoed
            }.value
        }
        // Loopback with one datagram in flight at a time does not lose them.
        #expect(echoed == (0..<200).map { Data("probe \($0)".utf8) })
        #expect(offThread.count == 0)
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    /// Over real sockets, with the consumer on an ordinary task: bursts whose later messages are
    /// held back until their read ends, each followed by a lone message that must arrive without
    /// another read coming after it. Everything arrives, in order, within the deadline.
    @Test(arguments: [MCSessionSendDataMode.reliable, .unreliable])
    func burstsAndLoneMessagesAllReachAnEventsTask(mode: MCSessionSendDataMode) async throws {
        let (alice, bob) = try await Self.connectedPair()
        let events = alice.events()
        let received = Received()
        let collector = Task {
            for await event in events {
                if case .dataReceived(let data, _) = event { received.append(data) }
            }
        }
        defer { collector.cancel() }
        let alicePeer = alice.myPeerID
        var sent: [Data] = []
        for round in 0..<20 {
            let burst = (0..<(mode == .reliable ? 50 : 20)).map { Data("\(round).\($0)".utf8) }
            for message in burst { try bob.send(message, toPeers: [alicePeer], with: mode) }
            sent += burst
            // Loopback neither drops nor reorders 20 small datagrams of one flow.
            #expect(try await eventually { received.all.count == sent.count })
            let lone = Data("\(round) alone".utf8)
            try bob.send(lone, toPeers: [alicePeer], with: mode)
            sent.append(lone)
            #expect(try await eventually { received.all.last == lone }, "round \(round): the lone message did not arrive")
        }
        #expect(received.all == sent)
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    /// A send made on the network thread goes out after sends other threads queued before it,
    /// even though their drain has not run yet (the network thread is busy running this code).
    @Test func sendsFromTheNetworkThreadDoNotOvertakeQueuedOnes() async throws {
        let (alice, bob) = try await Self.connectedPair()
        let received = Received()
        let events = alice.events()
        let collector = Task {
            for await event in events {
                if case .dataReceived(let data, _) = event { received.append(data) }
            }
        }
        defer { collector.cancel() }
        let alicePeer = alice.myPeerID
        let onLoop = await withTaskExecutorPreference(bob.taskExecutor) {
            let onLoop = MultiThreadedEventLoopGroup.currentEventLoop != nil
            for index in 0..<600 {
                let message = Data("\(index)".utf8)
                if index % 2 == 0 {
                    // Another thread queues while this one holds the loop, so its drain must wait.
                    // (async and wait: `sync` would run the block on this very thread.)
                    let queued = DispatchSemaphore(value: 0)
                    DispatchQueue.global().async {
                        try? bob.send(message, toPeers: [alicePeer], with: .reliable)
                        queued.signal()
                    }
                    queued.wait()
                } else {
                    try? bob.send(message, toPeers: [alicePeer], with: .reliable)
                }
            }
            return onLoop
        }
        #expect(onLoop)
        #expect(try await eventually { received.all.count == 600 })
        #expect(received.all == (0..<600).map { Data("\($0)".utf8) })
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }

    /// An actor isolated to `executor` runs on the network thread and can send from there.
    @Test func anActorOnTheSessionExecutorSendsFromTheNetworkThread() async throws {
        let (alice, bob) = try await Self.connectedPair()
        let events = alice.events()
        let link = Link(session: bob)
        #expect(try await link.sendOnNetworkThread(Data("from the actor".utf8), to: alice.myPeerID))
        let first = try await withDeadline(seconds: 10) { () async -> Data? in
            for await event in events { if case .dataReceived(let data, _) = event { return data } }
            return nil
        }
        #expect(first == Data("from the actor".utf8))
        await alice.disconnectAndWait()
        await bob.disconnectAndWait()
    }
}

actor Link {
    let session: MCSession
    nonisolated var unownedExecutor: UnownedSerialExecutor { session.executor.asUnownedSerialExecutor() }

    init(session: MCSession) { self.session = session }

    /// Sends and reports whether this ran on an event loop thread.
    func sendOnNetworkThread(_ data: Data, to peer: MCPeerID) throws -> Bool {
        try session.send(data, toPeers: [peer], with: .reliable)
        return MultiThreadedEventLoopGroup.currentEventLoop != nil
    }
}

/// Counts events handled off an event loop thread.
final class OffThreadCount: Sendable {
    private let value = Mutex(0)
    func check() {
        if MultiThreadedEventLoopGroup.currentEventLoop == nil { value.withLock { $0 += 1 } }
    }
    var count: Int { value.withLock { $0 } }
}

final class Received: Sendable {
    private let value = Mutex<[Data]>([])
    func append(_ data: Data) { value.withLock { $0.append(data) } }
    var all: [Data] { value.withLock { $0 } }
}
