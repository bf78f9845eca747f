import MultipeerConnectivity
import MultipeerTestSupport
import Testing

/// Apple sets no size limit on `.unreliable` messages; apps send camera frames and game
/// snapshots of tens of kilobytes that way. Here a message over the datagram size goes over the
/// peer's connection, and is dropped (not refused) when that peer's send queue is full.
@Suite("Unreliable messages above the datagram size")
struct LargeUnreliableMessageTests {
    /// The app's delegate: reports states and every message.
    final class Player: NSObject, MCSessionDelegate, Sendable {
        let states: AsyncStream<MCSessionState>
        let messages: AsyncStream<Data>
        private let stateContinuation: AsyncStream<MCSessionState>.Continuation
        private let messageContinuation: AsyncStream<Data>.Continuation

        override init() {
            (states, stateContinuation) = AsyncStream.makeStream()
            (messages, messageContinuation) = AsyncStream.makeStream()
        }

        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { stateContinuation.yield(state) }
        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) { messageContinuation.yield(data) }
        func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
        func session(
            _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            with progress: Progress
        ) {}
        func session(
            _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            at localURL: URL?, withError error: (any Error)?
        ) {}
    }

    /// Holds the session's network thread, so that nothing queued to its peers is written until
    /// `release`: a send queue that stays full for as long as the test needs.
    final class NetworkThreadHold: Sendable {
        private let holding = DispatchSemaphore(value: 0)
        private let released = DispatchSemaphore(value: 0)

        init(_ session: MCSession) {
            Task(executorPreference: session.taskExecutor) { self.park() }
        }

        /// On the network thread: says so, then waits (10 s at most, so a failed test ends).
        private func park() {
            holding.signal()
            _ = released.wait(timeout: .now() + 10)
        }

        func waitUntilHeld() async throws -> Bool {
            try await onOwnThread { self.holding.wait(timeout: .now() + 10) == .success }
        }

        func release() { released.signal() }
    }

    static func frame(_ tag: UInt8, count: Int = 100_000) -> Data {
        Data([tag] + (1..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    }

    @Test func aLargeUnreliableMessageArrivesWholeOrNotAtAll() async throws {
        var small = MCSessionConfiguration.loopbackOnly
        small.maximumQueuedBytesPerPeer = 256 << 10
        let sender = MCSession(peer: MCPeerID(displayName: "camera"), securityIdentity: nil, encryptionPreference: .required, configuration: small)
        let receiver = MCSession(peer: MCPeerID(displayName: "viewer"), securityIdentity: nil, encryptionPreference: .required, configuration: small)
        let viewer = Player()
        let camera = Player()
        receiver.delegate = viewer
        sender.delegate = camera
        let data = try await receiver.nearbyConnectionData(forPeer: sender.myPeerID)
        sender.connectPeer(receiver.myPeerID, withNearbyConnectionData: data)
        _ = try await firstMatch(in: viewer.states, seconds: 20) { $0 == .connected ? true : nil }
        _ = try await firstMatch(in: camera.states, seconds: 20) { $0 == .connected ? true : nil }
        let viewerPeer = receiver.myPeerID

        // 100 kB, unreliable, as Apple's apps send it: no error, and it arrives intact.
        let first = Self.frame(UInt8(ascii: "A"))
        try sender.send(first, toPeers: [viewerPeer], with: .unreliable)
        #expect(try await firstMatch(in: viewer.messages, seconds: 20) { $0.first == UInt8(ascii: "A") ? $0 : nil } == first)
        // Sent as a reliable message, it is kept until the viewer acknowledges it (docs/PROTOCOL.md
        // §7.9), which the network thread must be free to read.
        #expect(try await eventually { sender.queuedByteCount(to: viewerPeer) == 0 })

        // The sender's queue to the viewer fills and stays full: its network thread writes
        // nothing while held. A reliable message over the room left is refused...
        let hold = NetworkThreadHold(sender)
        // Released however the test ends: the held thread may serve other sessions too.
        defer { hold.release() }
        #expect(try await hold.waitUntilHeld())
        try sender.send(Self.frame(UInt8(ascii: "R"), count: 200_000), toPeers: [viewerPeer], with: .reliable)
        let refusal = #expect(throws: MCError.self) {
            try sender.send(Self.frame(UInt8(ascii: "X")), toPeers: [viewerPeer], with: .reliable)
        }
        #expect(refusal?.code == .unavailable)
        // ...and an unreliable one is dropped, as Apple's are when they cannot be sent at once.
        try sender.send(Self.frame(UInt8(ascii: "B")), toPeers: [viewerPeer], with: .unreliable)
        hold.release()

        try await sender.send(Data("end".utf8), to: [viewerPeer])
        let seen = try await withDeadline(seconds: 30) {
            var tags: [UInt8] = []
            for await message in viewer.messages {
                if message == Data("end".utf8) { return tags }
                tags.append(message.first ?? 0)
            }
            return tags
        }
        #expect(seen == [UInt8(ascii: "R")], "only the reliable message arrived before the end")
        sender.disconnect()
        receiver.disconnect()
    }
}
