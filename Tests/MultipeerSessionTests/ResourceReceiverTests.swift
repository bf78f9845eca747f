import Foundation
import MultipeerCrypto
@testable import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// The receiving end of a resource on its own, fed frames by hand (docs/PROTOCOL.md §6.4.16,
/// §7.8): a short transfer and a wrong digest are refused with RESOURCE_CANCEL 2 and leave no file.
@Suite("Resource receiver")
struct ResourceReceiverTests {
    /// Records what the receiver asks of the engine.
    final class Linkage: ChannelLinkage {
        let sent = Mutex<[Frame]>([])
        let taken = Mutex(0)
        func channelReady(_ channel: UInt32) {}
        func channelTaken(_ bytes: Int, on channel: UInt32) { taken.withLock { $0 += bytes } }
        func channelSend(_ frame: Frame) { sent.withLock { $0.append(frame) } }
    }

    static func receive(_ frames: [Frame], size: UInt64) async throws -> (Result<String, TransferError>, [Frame], String) {
        let directory = NSTemporaryDirectory() + "mpcp-receiver-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/file.part"
        let linkage = Linkage()
        let outcome = Mutex<Result<String, TransferError>?>(nil)
        let offer = try ResourceOffer(size: size, transferID: .zero, name: "x")
        let receiver = ResourceReceiver(
            channel: 1, offer: offer, peer: try WirePeerID(identifier: .random(), displayName: "peer"), path: path,
            file: try OpenFile.create(path), resumed: nil, pool: .singleton, eventLoop: MultiThreadedEventLoopGroup.singleton.next(),
            linkage: linkage, keepPartial: nil, writeFault: nil, onProgress: { _ in }, onCompletion: { result in outcome.withLock { $0 = result } })
        for frame in frames { receiver.peerSent(frame) }
        try #require(try await eventually { outcome.withLock { $0 } != nil })
        return (outcome.withLock { $0 }!, linkage.sent.withLock { $0 }, path)
    }

    static func digest(_ bytes: [UInt8]) -> SHA256Digest { try! SHA256Digest(bytes: SHA256Hasher.digest(bytes)) }

    @Test func theWholeContentWithItsDigestIsStored() async throws {
        let bytes = [UInt8](repeating: 9, count: 1_000)
        let (result, sent, path) = try await Self.receive(
            [.resourceChunk(channel: 1, ByteBuffer(bytes: bytes)), .resourceComplete(channel: 1, sha256: Self.digest(bytes))], size: 1_000)
        #expect(try result.get() == path)
        #expect(sent == [.resourceReceived(channel: 1)])
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(bytes))
    }

    @Test func aShortTransferIsAnIntegrityFailureAndLeavesNoFile() async throws {
        let bytes = [UInt8](repeating: 9, count: 999)
        let (result, sent, path) = try await Self.receive(
            [.resourceChunk(channel: 1, ByteBuffer(bytes: bytes)), .resourceComplete(channel: 1, sha256: Self.digest(bytes))], size: 1_000)
        guard case .failure(let error) = result else { Issue.record("a short transfer was stored"); return }
        #expect(error.code == .integrityFailure)
        #expect(sent == [.resourceCancel(channel: 1, reason: .integrityFailure)])
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func aWrongDigestIsAnIntegrityFailureAndLeavesNoFile() async throws {
        let bytes = [UInt8](repeating: 9, count: 1_000)
        var wrong = bytes
        wrong[500] = 8
        let (result, sent, path) = try await Self.receive(
            [.resourceChunk(channel: 1, ByteBuffer(bytes: bytes)), .resourceComplete(channel: 1, sha256: Self.digest(wrong))], size: 1_000)
        guard case .failure(let error) = result else { Issue.record("a mismatched file was stored"); return }
        #expect(error.code == .integrityFailure)
        #expect(sent == [.resourceCancel(channel: 1, reason: .integrityFailure)])
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    /// A lost connection reported from another thread while writes run (`failed` is safe from
    /// any thread; the engine calls it on the loop): the partial kept for resuming must be exactly
    /// as long as the file. Before the fix a batch could start between the decision and the claim
    /// and land past the recorded length (found by fuzz-channel-endpoints). A race, so many rounds.
    @Test func aPartialKeptForResumingIsExactlyTheFile() async throws {
        let directory = NSTemporaryDirectory() + "mpcp-receiver-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chunk = ByteBuffer(bytes: [UInt8](repeating: 5, count: 3_200))
        var mismatches = 0
        var checked = 0
        for round in 0..<400 {
            let path = directory + "/\(round).part"
            let store = Mutex(ResumeStore(capacity: 4, lifetime: .seconds(60)))
            let key = ResumeStore.Key(peer: .zero, fingerprint: nil, transferID: .zero, size: 1 << 20)
            let done = Mutex(false)
            let receiver = ResourceReceiver(
                channel: 1, offer: try ResourceOffer(size: 1 << 20, transferID: .zero, name: "x"),
                peer: try WirePeerID(identifier: .random(), displayName: "peer"), path: path,
                file: try OpenFile.create(path), resumed: nil, pool: .singleton, eventLoop: MultiThreadedEventLoopGroup.singleton.next(),
                linkage: Linkage(), keepPartial: { partial, resumed in store.withLock { _ = $0.keep(partial, for: key, resumed: resumed, now: .now()) } }, writeFault: nil,
                onProgress: { _ in }, onCompletion: { _ in done.withLock { $0 = true } })
            for _ in 0..<(round % 7 + 2) { receiver.peerSent(.resourceChunk(channel: 1, chunk)) }
            receiver.failed(TransferError(.connectionLost))
            try #require(try await eventually { done.withLock { $0 } })
            // Whatever was still being written has landed once the pool is idle.
            try await NIOThreadPool.singleton.runIfActive { }
            guard let partial = store.withLock({ $0.take(key, now: .now()).partial }) else { continue }
            checked += 1
            let length = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? 0
            if length != partial.length { mismatches += 1 }
        }
        #expect(checked > 100 && mismatches == 0, "\(mismatches) of \(checked) kept partials differ from their files")
    }
}
