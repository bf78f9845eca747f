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

/// A receiver cut off mid-transfer keeps its hash state with the partial, and the resumed
/// transfer finishes from it (docs/PROTOCOL.md §7.8).
@Suite("Resumed receiver")
struct ResumedReceiverTests {
    /// The kept hash state is SHA-256 of exactly the bytes in the kept file, and a transfer cut
    /// twice and resumed from it verifies against the digest of the whole content.
    @Test func theKeptHashStateFinishesAsTheDigestOfTheWholeFile() async throws {
        let directory = NSTemporaryDirectory() + "mpcp-resume-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/file.part"
        let content = seededContent(3 << 20 + 1_234, seed: 28)
        let size = UInt64(content.count)
        let digest = try SHA256Digest(bytes: SHA256Hasher.digest(content))
        let key = ResumeStore.Key(peer: .zero, fingerprint: nil, transferID: .zero, size: size)
        let store = Mutex(ResumeStore(capacity: 4, lifetime: .minutes(10)))
        var resumed: ResumeStore.Partial?
        var sent = 0
        for (attempt, cut) in [1 << 20 + 77, 2 << 20 + 5, content.count].enumerated() {
            let outcome = Mutex<Result<String, TransferError>?>(nil)
            let stored = Mutex<UInt64>(0)
            let file = try resumed == nil ? OpenFile.create(path) : OpenFile.openForUpdate(path)
            if let resumed { try file.truncate(to: resumed.length) }
            let receiver = ResourceReceiver(
                channel: 1, offer: try ResourceOffer(size: size, transferID: .zero, name: "x"),
                peer: try WirePeerID(identifier: .zero, displayName: "peer"), path: path, file: file, resumed: resumed,
                pool: .singleton, eventLoop: MultiThreadedEventLoopGroup.singleton.next(), linkage: ResourceReceiverTests.Linkage(),
                keepPartial: { partial, resumed in store.withLock { _ = $0.keep(partial, for: key, resumed: resumed, now: .now()) } }, writeFault: nil,
                onProgress: { bytes in stored.withLock { $0 = bytes } }, onCompletion: { result in outcome.withLock { $0 = result } })
            sent = Int(resumed?.length ?? 0)
            while sent < cut {
                let count = min(65_536, cut - sent)
                receiver.peerSent(.resourceChunk(channel: 1, ByteBuffer(bytes: content[sent..<sent + count])))
                sent += count
            }
            if cut == content.count {
                receiver.peerSent(.resourceComplete(channel: 1, sha256: digest))
            } else {
                try #require(try await eventually { stored.withLock { $0 } == UInt64(cut) })
                receiver.failed(TransferError(.connectionLost))
            }
            try #require(try await eventually { outcome.withLock { $0 } != nil })
            if cut == content.count {
                #expect(try outcome.withLock { $0 }?.get() == path)
                #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(content))
                return
            }
            let kept = try #require(store.withLock { $0.take(key, now: .now()).partial }, "attempt \(attempt) kept nothing")
            let onDisk = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)).prefix(Int(kept.length)))
            #expect(kept.length == UInt64(cut))
            #expect(onDisk == Array(content.prefix(cut)))
            #expect(kept.hashState.copy()?.finalize() == SHA256Hasher.digest(onDisk))
            resumed = kept
        }
    }
}
