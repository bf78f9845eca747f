import Foundation
import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import MultipeerProtocol

/// What one channel endpoint script did, so tests can tell that a seed reaches the state it is named for.
public struct ChannelEndpointRun: Sendable {
    public var isResource = false
    /// Stream: bytes the application read; resource: bytes the peer sent.
    public var bytes = 0
    /// How it ended: "closed", "open" (stream); "stored", "kept" (a partial kept for resuming), or
    /// the failure's TransferError code.
    public var outcome = ""
}

/// Records what an endpoint asks of the engine.
private final class RecordingLinkage: ChannelLinkage {
    let taken = Mutex(0)
    let sent = Mutex<[Frame]>([])
    func channelReady(_ channel: UInt32) {}
    func channelTaken(_ bytes: Int, on channel: UInt32) { taken.withLock { $0 += bytes } }
    func channelSend(_ frame: Frame) { sent.withLock { $0.append(frame) } }
}

extension SessionFuzzChecks {
    /// The receiving ends of channels (docs/PROTOCOL.md §7.6, §7.8), `ByteStreamReader` and
    /// `ResourceReceiver` (real files, written on a thread pool), fed the frames the channel table
    /// lets through, in any order the table allows, with the application reading, cancelling and
    /// the connection failing in between.
    ///
    /// Input: setup bytes (stream or resource, window, resource size, a resume store), then
    /// operations. Checks: no trap; a stream's reader gets exactly the bytes sent, in order, and
    /// never holds more than was sent and not taken; window returned never exceeds bytes sent; the
    /// reader sends at most one frame, a STREAM_RESET 1 only after the application cancelled an
    /// open stream. A resource ends exactly once; it is stored only when all `size` bytes arrived
    /// with their digest, byte-identical; an integrity failure answers RESOURCE_CANCEL 2 and leaves
    /// no file; a peer's cancel or reset answers nothing and leaves no file; a lost connection
    /// keeps a prefix of the content when a store is given, and no file otherwise.
    @discardableResult
    public static func checkChannelEndpoint(_ data: UnsafeRawBufferPointer) -> ChannelEndpointRun {
        var input = FuzzInput(data)
        return input.bool() ? checkResource(&input) : checkStream(&input)
    }

    /// Content byte `index` of a script: any deterministic pattern that is not constant.
    private static func contentByte(_ index: Int, seed: UInt8) -> UInt8 {
        UInt8(truncatingIfNeeded: index &* 31 &+ index >> 8 &+ Int(seed))
    }

    private static func checkStream(_ input: inout FuzzInput) -> ChannelEndpointRun {
        let window = (Int(input.byte()) + 1) * 64
        let seed = input.byte()
        let linkage = RecordingLinkage()
        let reader = ByteStreamReader(name: "s", peer: fuzzPeer, channel: 1, linkage: linkage)
        var sent = 0
        var read = 0
        var ended = false  // the peer closed or reset it, or the connection went
        var closed = false
        var failedFirst: TransferError.Code?
        var cancelledWhileOpen = false
        var cancelled = false

        func readSome(_ count: Int) {
            var buffer = [UInt8](repeating: 0, count: count)
            let copied = buffer.withUnsafeMutableBytes { reader.read(into: $0) }
            precondition(copied <= count && read + copied <= sent, "read more than was sent")
            for offset in 0..<copied {
                precondition(buffer[offset] == contentByte(read + offset, seed: seed), "stream bytes out of order or altered")
            }
            read += copied
        }

        for _ in 0..<512 where !input.isExhausted {
            switch input.byte() % 8 {
            case 0, 1:
                let outstanding = sent - linkage.taken.withLock { $0 }
                let count = min(Int(input.byte()) * 8, window - outstanding)
                guard !ended, count > 0 else { continue }
                let bytes = (sent..<sent + count).map { contentByte($0, seed: seed) }
                sent += count
                reader.peerSent(.streamData(channel: 1, ByteBuffer(bytes: bytes)))
            case 2:
                readSome(Int(input.byte()) + 1)
            case 3:
                guard !ended else { continue }
                reader.peerSent(.streamClose(channel: 1))
                ended = true
                closed = true
            case 4:
                guard !ended else { continue }
                let code = StreamResetCode(rawValue: UInt16(input.byte() % 5))
                reader.peerSent(.streamReset(channel: 1, code: code))
                ended = true
                failedFirst = code == .cancelled ? .cancelledByPeer : code == .refused ? .refusedByPeer : .resetByPeer
            case 5:
                guard !ended else { continue }
                reader.failed(TransferError(.connectionLost))
                ended = true
                failedFirst = .connectionLost
            case 6:
                if !ended && !cancelled {
                    cancelledWhileOpen = true
                    ended = true  // the reset ends the channel: the table drops what follows
                }
                cancelled = true
                reader.cancel()
            default:
                break
            }
            let taken = linkage.taken.withLock { $0 }
            precondition(taken <= sent, "more window returned than bytes sent")
            precondition(reader.bufferedByteCount == sent - taken, "buffered bytes and returned window disagree")
        }
        if !cancelled {
            while true {
                let before = read
                readSome(4096)
                if read == before { break }
            }
            precondition(read == sent, "bytes sent were never readable")
        }
        let frames = linkage.sent.withLock { $0 }
        if cancelledWhileOpen {
            precondition(frames == [.streamReset(channel: 1, code: .cancelled)],
                "a cancel of an open stream must send exactly STREAM_RESET 1")
        } else {
            precondition(frames.isEmpty, "the reader sent a frame nobody asked for")
        }
        let failure = reader.failure
        switch (closed, failedFirst, cancelledWhileOpen) {
        case (_, _, true): precondition(failure?.code == .cancelled, "a cancelled stream must fail as cancelled")
        case (true, _, false): precondition(failure == nil && reader.isAtEnd, "a closed stream read to its end must end cleanly")
        case (false, let code?, false): precondition(failure?.code == code, "the first failure must be the one reported")
        case (false, nil, false): precondition(failure == nil && !reader.isAtEnd, "an open stream must stay open")
        }
        let outcome = failure.map { "\($0.code)" } ?? (closed ? "closed" : "open")
        return ChannelEndpointRun(isResource: false, bytes: read, outcome: outcome)
    }

    private static func checkResource(_ input: inout FuzzInput) -> ChannelEndpointRun {
        let size = Int(input.integer(UInt16.self))
        let window = (Int(input.byte()) + 1) * 256
        let usesStore = input.bool()
        let seed = input.byte()
        let content = (0..<size).map { contentByte($0, seed: seed) }
        let rightDigest = try! SHA256Digest(bytes: SHA256Hasher.digest(content))
        let path = scratchDirectory + "/\(UUID().uuidString).part"
        let linkage = RecordingLinkage()
        let outcomes = Mutex<[Result<String, TransferError>]>([])
        let store = usesStore ? LockedResumeStore() : nil
        let key = ResumeStore.Key(peer: fuzzPeer.identifier, fingerprint: nil, transferID: .zero, size: UInt64(size))
        var keep: (@Sendable (ResumeStore.Partial, ResumeStore.Partial?) -> Void)?
        if let store {
            keep = { partial, resumed in
                for dropped in store.value.withLock({ $0.keep(partial, for: key, resumed: resumed, now: NIODeadline.now()) }) { unlink(dropped.path) }
            }
        }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let receiver = ResourceReceiver(
            channel: 1, offer: try! ResourceOffer(size: UInt64(size), transferID: .zero, name: "r"), peer: fuzzPeer, path: path,
            file: try! OpenFile.create(path), resumed: nil, pool: .singleton, eventLoop: loop,
            linkage: linkage, keepPartial: keep, writeFault: nil,
            onProgress: { _ in },
            onCompletion: { result in
                outcomes.withLock { outcomes in
                    precondition(outcomes.isEmpty, "a resource ended more than once")
                    outcomes.append(result)
                }
            })
        // The engine hands the receiver the peer's frames on its loop, and only while the channel
        // is open: once the receiver sent its final frame the table drops the rest (nil here).
        // Returns whether it was handed over.
        func peer(_ frame: Frame) -> Bool {
            try! loop.submit { () -> Bool in
                guard linkage.sent.withLock({ $0.isEmpty }) else { return false }
                receiver.peerSent(frame)
                return true
            }.wait()
        }
        defer { unlink(path) }

        var sent = 0
        var ended = false  // the peer cancelled or reset it, or the connection went
        var completedWith: SHA256Digest?
        var appCancelled = false
        var peerEnded = false
        var connectionLost = false

        for _ in 0..<256 where !input.isExhausted {
            switch input.byte() % 8 {
            case 0, 1:
                let wanted = Int(input.byte()) * 32
                guard !ended, completedWith == nil, sent < size, wanted > 0 else { continue }
                // The table holds the peer to its window: wait for room, as the peer would.
                let ready = waitUntil { window - (sent - linkage.taken.withLock { $0 }) > 0 || !outcomes.withLock { $0.isEmpty } }
                precondition(ready, "the receiver never returned window for bytes it was sent")
                let count = min(wanted, size - sent, window - (sent - linkage.taken.withLock { $0 }))
                guard count > 0 else { continue }
                guard peer(.resourceChunk(channel: 1, ByteBuffer(bytes: content[sent..<sent + count]))) else {
                    ended = true
                    continue
                }
                sent += count
            case 2, 3:
                guard !ended, completedWith == nil else { continue }
                var digest = rightDigest
                if input.byte() % 4 == 0 {
                    var bytes = digest.bytes
                    bytes[Int(input.byte()) % bytes.count] ^= 1
                    digest = try! SHA256Digest(bytes: bytes)
                }
                guard peer(.resourceComplete(channel: 1, sha256: digest)) else {
                    ended = true
                    continue
                }
                completedWith = digest
            case 4:
                guard !ended else { continue }
                let reason = ResourceCancelReason(rawValue: UInt16(input.byte() % 5))
                ended = true
                guard peer(.resourceCancel(channel: 1, reason: reason)) else { continue }
                peerEnded = true
            case 5:
                guard !ended else { continue }
                ended = true
                guard peer(.streamReset(channel: 1, code: StreamResetCode(rawValue: UInt16(input.byte() % 5)))) else { continue }
                peerEnded = true
            case 6:
                guard !ended else { continue }
                ended = true
                // Only channels still open are told (the engine forgets ended ones).
                let told = try! loop.submit { () -> Bool in
                    guard linkage.sent.withLock({ $0.isEmpty }) else { return false }
                    receiver.failed(TransferError(.connectionLost))
                    return true
                }.wait()
                connectionLost = told
            case 7:
                appCancelled = true
                receiver.cancel()
            default:
                break
            }
        }
        // A transfer that is still open ends with the connection, as the engine does on disconnect.
        if !ended && completedWith == nil && !appCancelled {
            try! loop.submit { receiver.failed(TransferError(.connectionLost)) }.wait()
            connectionLost = true
        }
        precondition(waitUntil { !outcomes.withLock { $0.isEmpty } }, "the resource never ended")
        // A second outcome would trap in onCompletion; let what is queued run before looking.
        try? NIOThreadPool.singleton.runIfActive(eventLoop: loop) {}.wait()
        let results = outcomes.withLock { $0 }
        let frames = linkage.sent.withLock { $0 }
        precondition(frames.count <= 1 && frames.allSatisfy { ChannelMux.ends($0, of: .resource, sentByOpener: false) },
            "the receiver sent more than its one final frame")
        precondition(linkage.taken.withLock { $0 } <= sent, "more window returned than bytes sent")
        let fileExists = access(path, F_OK) == 0

        let outcome: String
        switch results[0] {
        case .success(let stored):
            // Also when a cancel or a lost connection came after RESOURCE_COMPLETE: a race the
            // verification may win, and then everything below must hold as for any stored resource.
            precondition(stored == path && completedWith == rightDigest && sent == size, "stored without all bytes and their digest")
            precondition(frames == [.resourceReceived(channel: 1)], "a stored resource must be answered RESOURCE_RECEIVED")
            precondition(contents(of: path) == content, "the stored file differs from what was sent")
            precondition(linkage.taken.withLock { $0 } == sent, "window of stored bytes not returned")
            outcome = "stored"
        case .failure(let error):
            var keptPartial = false
            precondition(!fileExists || (connectionLost && usesStore), "a failed resource left its file")
            switch error.code {
            case _ where error.peerCode != nil:
                // The peer's own RESOURCE_CANCEL or STREAM_RESET, whatever reason it gave.
                precondition(peerEnded && frames.isEmpty, "\(error.code) from the peer without the peer ending it, or answered")
            case .integrityFailure:
                precondition(completedWith != nil && (completedWith != rightDigest || sent != size), "an intact resource failed its check")
                precondition(frames == [.resourceCancel(channel: 1, reason: .integrityFailure)], "an integrity failure must answer RESOURCE_CANCEL 2")
            case .cancelled:
                precondition(appCancelled, "cancelled without the application cancelling")
                precondition(frames == [.resourceCancel(channel: 1, reason: .cancelled)], "a cancel must answer RESOURCE_CANCEL 1")
            case .connectionLost:
                precondition(connectionLost && frames.isEmpty, "a lost connection answers nothing")
                if let store {
                    // An empty partial is not worth keeping: then there is no file either.
                    if let partial = store.value.withLock({ $0.take(key, now: .now()).partial }) {
                        keptPartial = true
                        precondition(partial.path == path && partial.length > 0, "the kept partial is not this transfer's")
                        let kept = contents(of: path) ?? []
                        precondition(kept.count == Int(partial.length) && kept.count <= sent && kept[...] == content.prefix(kept.count),
                            "the kept partial is not a prefix of what was sent, or not as long as recorded")
                        precondition(partial.hashState.copy()?.finalize() == SHA256Hasher.digest(kept),
                            "the kept hash state is not the SHA-256 of the kept bytes")
                    } else {
                        precondition(!fileExists, "a file left behind that nobody can resume")
                    }
                }
            default:
                precondition(peerEnded && frames.isEmpty, "\(error.code) without the peer ending it, or answered")
            }
            // Without a competing event the outcome is certain, whatever the pool's timing.
            if !(appCancelled || peerEnded || connectionLost), completedWith != nil {
                precondition(error.code == .integrityFailure, "a completed resource with nothing else happening must be stored or fail its check")
            }
            outcome = keptPartial ? "kept" : "\(error.code)"
        }
        return ChannelEndpointRun(isResource: true, bytes: sent, outcome: outcome)
    }

    /// Starts the thread pool and event loop the checks use, so that their one-time allocations
    /// are not taken for leaks of the first input (call it from `LLVMFuzzerInitialize`).
    public static func prepareChannelEndpointChecks() {
        try? NIOThreadPool.singleton.runIfActive(eventLoop: MultiThreadedEventLoopGroup.singleton.next()) {}.wait()
        _ = scratchDirectory
    }

    /// A file's bytes, read with the system calls.
    private static func contents(of path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var block = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = block.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { return count == 0 ? bytes : nil }
            bytes += block[..<count]
        }
    }

    /// Polls `condition` for up to 10 s (the pool and the loop run on their own threads).
    private static func waitUntil(_ condition: () -> Bool) -> Bool {
        let deadline = DispatchTime.now() + .seconds(10)
        while !condition() {
            guard DispatchTime.now() < deadline else { return false }
            usleep(50)
        }
        return true
    }

    private static let fuzzPeer = try! WirePeerID(identifier: Bytes16(bytes: [UInt8](repeating: 7, count: 16))!, displayName: "fuzz")

    /// One directory per process for the resource files; 0700 like the session's own.
    private static let scratchDirectory: String = {
        var template = Array((NSTemporaryDirectory() + "/mpcp-fuzz-channels-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "cannot make a scratch directory")
        return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()
}

/// The engine keeps its store behind a lock, shared by every receiver's keep callback.
private final class LockedResumeStore: Sendable {
    let value = Mutex(ResumeStore(capacity: 4, lifetime: .seconds(60)))
}
