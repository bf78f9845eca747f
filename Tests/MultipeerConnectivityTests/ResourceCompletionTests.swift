import MultipeerConnectivity
import MultipeerTestSupport
import Testing

/// An app's file sharer as Swift 6 apps write it: a main-actor class, its completion kept in a
/// stored closure of Apple's type (not Sendable) and handed to `sendResource` as it is.
@MainActor
private final class FileSharer {
    var onFinished: ((Error?) -> Void)?
    private(set) var finishedCount = 0

    func share(_ url: URL, to peer: MCPeerID, over session: MCSession) -> Progress? {
        session.sendResource(at: url, withName: "photo.jpg", toPeer: peer, withCompletionHandler: onFinished)
    }

    func countFinished() { finishedCount += 1 }
}

/// The receiving app's delegate: reports each finished resource.
private final class Receiver: NSObject, MCSessionDelegate, Sendable {
    let states: AsyncStream<MCSessionState>
    let finished: AsyncStream<Data?>
    private let stateContinuation: AsyncStream<MCSessionState>.Continuation
    private let finishedContinuation: AsyncStream<Data?>.Continuation

    override init() {
        (states, stateContinuation) = AsyncStream.makeStream()
        (finished, finishedContinuation) = AsyncStream.makeStream()
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { stateContinuation.yield(state) }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {
        finishedContinuation.yield(localURL.flatMap { try? Data(contentsOf: $0) })
    }
}

@Suite("sendResource's completion handler, Apple's type")
struct ResourceCompletionTests {
    /// A main-actor app: the stored, non-Sendable handler runs on the main actor, once.
    @MainActor
    @Test func aStoredHandlerRunsOnTheCallersActor() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mpc-completion-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("photo.jpg")
        let content = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try content.write(to: file)

        let sender = MCSession(peer: MCPeerID(displayName: "sender"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let receiver = MCSession(peer: MCPeerID(displayName: "receiver"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let receiving = Receiver()
        let sending = Receiver()
        receiver.delegate = receiving
        sender.delegate = sending
        let data = try await receiver.nearbyConnectionData(forPeer: sender.myPeerID)
        sender.connectPeer(receiver.myPeerID, withNearbyConnectionData: data)
        // Each side reports the other connected on its own time.
        _ = try await firstMatch(in: receiving.states, seconds: 20) { $0 == .connected ? true : nil }
        _ = try await firstMatch(in: sending.states, seconds: 20) { $0 == .connected ? true : nil }

        let sharer = FileSharer()
        let (outcomes, outcome) = AsyncStream<String>.makeStream()
        sharer.onFinished = { error in
            MainActor.assertIsolated("the handler runs where it was given")
            sharer.countFinished()  // main-actor state, touched without a hop
            outcome.yield(error.map { "\($0)" } ?? "done")
        }
        #expect(sharer.share(file, to: receiver.myPeerID, over: sender) != nil)
        #expect(sharer.finishedCount == 0)  // never before sendResource returns
        #expect(try await firstMatch(in: outcomes, seconds: 30) { $0 } == "done")
        #expect(sharer.finishedCount == 1)
        let stored = try await firstMatch(in: receiving.finished, seconds: 30) { $0 }
        #expect(stored == content)

        // A transfer that cannot start: nil, and the handler still runs, after the call returns.
        #expect(sharer.share(file, to: MCPeerID(displayName: "stranger"), over: sender) == nil)
        #expect(sharer.finishedCount == 1)
        let failure = try await firstMatch(in: outcomes, seconds: 30) { $0 }
        #expect(failure.contains("notConnected"))
        #expect(sharer.finishedCount == 2)
        sender.disconnect()
        receiver.disconnect()
    }

    /// Code isolated to no actor (a delegate-style class, a plain function): the handler runs on
    /// the session's delegate queue, where the delegate's calls run.
    @Test func fromNonisolatedCodeTheHandlerRuns() async throws {
        final class Uploader {
            var completion: ((Error?) -> Void)?
            func upload(_ session: MCSession) -> Progress? {
                session.sendResource(
                    at: URL(fileURLWithPath: "/nonexistent"), withName: "x", toPeer: MCPeerID(displayName: "nobody"),
                    withCompletionHandler: completion)
            }
        }
        let session = MCSession(peer: MCPeerID(displayName: "alone"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let (outcomes, outcome) = AsyncStream<String>.makeStream()
        let uploader = Uploader()
        uploader.completion = { error in outcome.yield(error.map { "\($0)" } ?? "done") }
        #expect(uploader.upload(session) == nil)
        let failure = try await firstMatch(in: outcomes, seconds: 10) { $0 }
        #expect(failure.contains("notConnected"))
    }
}
