import Foundation
@testable import MultipeerConnectivity
@testable import MultipeerSession
import MultipeerCrypto
import MultipeerTestSupport
import Synchronization
import Testing
@testable import MultipeerProtocol

/// A thread running its own run loop, as an app's thread that schedules streams would.
final class RunLoopThread: @unchecked Sendable {
    // @unchecked: `runLoop` is set once before `init` returns and only read afterwards.
    private(set) var runLoop: RunLoop!
    private let stopped = Mutex(false)
    private let started = DispatchSemaphore(value: 0)

    init(name: String) {
        let thread = Thread { [self] in
            runLoop = RunLoop.current
            // A timer keeps the run loop alive and bounds each wait.
            let keepalive = Timer(timeInterval: 0.05, repeats: true) { _ in }
            RunLoop.current.add(keepalive, forMode: .default)
            started.signal()
            while !stopped.withLock({ $0 }) { _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.1)) }
            keepalive.invalidate()
        }
        thread.name = name
        thread.start()
        started.wait()
    }

    /// Runs `body` on the thread, inside its run loop.
    func perform(_ body: @escaping @Sendable () -> Void) {
        runLoop.add(Timer(timeInterval: 0, repeats: false) { _ in body() }, forMode: .default)
    }

    func stop() { stopped.withLock { $0 = true } }
}

/// Writes `content` to an output stream from its run loop, a chunk per `hasSpaceAvailable`, then closes it.
final class StreamPump: NSObject, StreamDelegate, @unchecked Sendable {
    private let content: [UInt8]
    private let chunk: Int
    private var offset = 0
    private let state = Mutex<(events: [Stream.Event], done: Bool, failed: Bool)>(([], false, false))

    init(content: [UInt8], chunk: Int) {
        self.content = content
        self.chunk = chunk
    }

    var done: Bool { state.withLock { $0.done } }
    var failed: Bool { state.withLock { $0.failed } }
    var events: [Stream.Event] { state.withLock { $0.events } }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        state.withLock { $0.events.append(eventCode) }
        guard let output = aStream as? OutputStream else { return }
        switch eventCode {
        case .hasSpaceAvailable:
            guard offset < content.count else { return }
            let count = min(chunk, content.count - offset)
            let written = content.withUnsafeBufferPointer { output.write($0.baseAddress! + offset, maxLength: count) }
            if written < 0 {
                state.withLock { $0.failed = true }
                return
            }
            offset += written
            if offset == content.count {
                output.close()
                state.withLock { $0.done = true }
            }
        case .errorOccurred:
            state.withLock { $0.failed = true }
        default:
            break
        }
    }
}

/// Reads an input stream from its run loop, as much as is there per `hasBytesAvailable`.
final class StreamDrain: NSObject, StreamDelegate, @unchecked Sendable {
    private let state = Mutex<(bytes: [UInt8], ended: Bool, failed: Bool, events: [Stream.Event])>(([], false, false, []))

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var ended: Bool { state.withLock { $0.ended } }
    var failed: Bool { state.withLock { $0.failed } }
    var events: [Stream.Event] { state.withLock { $0.events } }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        state.withLock { $0.events.append(eventCode) }
        guard let input = aStream as? InputStream else { return }
        switch eventCode {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 16_384)
            let count = input.read(&buffer, maxLength: buffer.count)
            if count > 0 { state.withLock { $0.bytes += buffer[0..<count] } }
        case .endEncountered:
            input.close()
            state.withLock { $0.ended = true }
        case .errorOccurred:
            state.withLock { $0.failed = true }
        default:
            break
        }
    }
}

/// A delegate that hands incoming streams to a run loop (or keeps them for polling) and records
/// resources, as Apple-era apps do.
final class ChannelDelegate: MCSessionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _streams: [(InputStream, String, MCPeerID)] = []
    private var _started: [(String, MCPeerID, Progress)] = []
    private var _finished: [(String, MCPeerID, URL?, (any Error)?, Bool)] = []
    private var _onDelegateQueueFileExisted: [Bool] = []
    let runLoop: RunLoopThread?
    let drain = StreamDrain()
    /// Where finished files are moved to, if anywhere.
    let moveTo: String?

    init(runLoop: RunLoopThread?, moveTo: String? = nil) {
        self.runLoop = runLoop
        self.moveTo = moveTo
    }

    var streams: [(InputStream, String, MCPeerID)] { lock.withLock { _streams } }
    var started: [(String, MCPeerID, Progress)] { lock.withLock { _started } }
    /// name, peer, URL, error, whether the file existed while the delegate method ran.
    var finished: [(String, MCPeerID, URL?, (any Error)?, Bool)] { lock.withLock { _finished } }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {
        lock.withLock { _streams.append((stream, streamName, peerID)) }
        guard let runLoop else { return }
        let box = UncheckedSendable(stream)
        runLoop.perform { [drain] in
            box.value.delegate = drain
            box.value.schedule(in: .current, forMode: .default)
            box.value.open()
        }
    }

    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {
        lock.withLock { _started.append((resourceName, peerID, progress)) }
    }

    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {
        let existed = localURL.map { FileManager.default.fileExists(atPath: $0.path) } ?? false
        if let localURL, let moveTo { try? FileManager.default.moveItem(atPath: localURL.path, toPath: moveTo) }
        lock.withLock { _finished.append((resourceName, peerID, localURL, error, existed)) }
    }
}

struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

@Suite("MCSession streams and resources, Apple's API and async", .serialized)
struct MCStreamResourceTests {
    static let pki = try! TestPKI()

    static func sessions(_ preference: MCEncryptionPreference = .required) throws -> (MCSession, MCSession) {
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try pki.peer("alice"), encryptionPreference: preference, configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try pki.peer("bob"), encryptionPreference: preference, configuration: .loopbackOnly)
        return (alice, bob)
    }

    static func connect(_ alice: MCSession, _ bob: MCSession) async throws {
        let data = try await alice.nearbyConnectionData(forPeer: bob.myPeerID)
        try bob.connect(to: alice.myPeerID, nearbyConnectionData: data)
        try #require(try await eventually { alice.connectedPeers.count == 1 && bob.connectedPeers.count == 1 })
    }

    static func content(_ count: Int, seed: UInt64) -> [UInt8] { seededContent(count, seed: seed) }

    /// Apple-era code: both ends scheduled in run loops, the writer pumping a chunk per
    /// `hasSpaceAvailable`, the reader reading per `hasBytesAvailable` until `endEncountered`.
    /// Apple's streams report their state once scheduled, so code that opens before it
    /// schedules works too (`openFirst`).
    @Test(arguments: [false, true])
    func runLoopPumpedStreamsCarryEveryByte(openFirst: Bool) async throws {
        let (alice, bob) = try Self.sessions()
        let receiving = RunLoopThread(name: "bob-streams")
        let sending = RunLoopThread(name: "alice-streams")
        defer { receiving.stop(); sending.stop() }
        let delegate = ChannelDelegate(runLoop: receiving)
        bob.delegate = delegate
        try await Self.connect(alice, bob)

        let content = Self.content(3 << 20, seed: 1)
        let output = try alice.startStream(withName: "video", toPeer: bob.myPeerID)
        let pump = StreamPump(content: content, chunk: 10_000)
        let box = UncheckedSendable(output)
        sending.perform {
            box.value.delegate = pump
            if openFirst { box.value.open() }
            box.value.schedule(in: .current, forMode: .default)
            if !openFirst { box.value.open() }
        }
        #expect(try await eventually(seconds: 30) { delegate.drain.ended })
        #expect(pump.done && !pump.failed && !delegate.drain.failed, "pump \(pump.events.count) events, drain \(delegate.drain.events.count) events, \(delegate.drain.bytes.count) bytes, streams \(delegate.streams.count), space \(output.hasSpaceAvailable), status \(output.streamStatus.rawValue), input status \(delegate.streams.first?.0.streamStatus.rawValue ?? 99), avail \(delegate.streams.first?.0.hasBytesAvailable ?? false)")
        #expect(delegate.streams.first?.1 == "video" && delegate.streams.first?.2 == alice.myPeerID)
        #expect(delegate.drain.bytes == content)
        #expect(pump.events.first == .openCompleted && delegate.drain.events.first == .openCompleted)
        #expect(delegate.drain.events.last == .endEncountered)
    }

    /// Without a run loop: the writer polls `hasSpaceAvailable` and takes partial writes, the
    /// reader blocks in `read` until bytes come and gets 0 at the end.
    @Test func pollingStreamsWithoutARunLoop() async throws {
        let (alice, bob) = try Self.sessions()
        let delegate = ChannelDelegate(runLoop: nil)
        bob.delegate = delegate
        try await Self.connect(alice, bob)
        let content = Self.content(2 << 20, seed: 2)
        let output = UncheckedSendable(try alice.startStream(withName: "poll", toPeer: bob.myPeerID))
        let sawPartialWrite = Mutex(false)
        let writer = Thread {
            let stream = output.value
            stream.open()
            var offset = 0
            let deadline = Date(timeIntervalSinceNow: 30)
            while offset < content.count && Date() < deadline {
                guard stream.hasSpaceAvailable else {
                    Thread.sleep(forTimeInterval: 0.001)
                    continue
                }
                let asked = min(1 << 20, content.count - offset)
                let written = content.withUnsafeBufferPointer { stream.write($0.baseAddress! + offset, maxLength: asked) }
                if written < asked { sawPartialWrite.withLock { $0 = true } }
                if written < 0 { return }
                offset += written
            }
            stream.close()
        }
        writer.start()
        try #require(try await eventually { delegate.streams.count == 1 })
        let input = UncheckedSendable(delegate.streams[0].0)
        let received = try await withDeadline(seconds: 30) {
            var bytes: [UInt8] = []
            let stream = input.value
            stream.open()
            var buffer = [UInt8](repeating: 0, count: 70_000)
            while true {
                let count = stream.read(&buffer, maxLength: buffer.count)
                if count <= 0 { break }
                bytes += buffer[0..<count]
            }
            #expect(stream.streamStatus == .atEnd)
            return bytes
        }
        #expect(received == content)
        #expect(sawPartialWrite.withLock { $0 })
    }

    @Test func closingTheInputStreamEarlyFailsTheWriter() async throws {
        let (alice, bob) = try Self.sessions()
        let delegate = ChannelDelegate(runLoop: nil)
        bob.delegate = delegate
        try await Self.connect(alice, bob)
        let output = try alice.startStream(withName: "early", toPeer: bob.myPeerID)
        output.open()
        let bytes: [UInt8] = [1, 2, 3]
        #expect(output.write(bytes, maxLength: 3) == 3)
        try #require(try await eventually { delegate.streams.count == 1 })
        delegate.streams[0].0.open()
        delegate.streams[0].0.close()
        #expect(try await eventually { output.streamStatus == .error })
        #expect((output.streamError as? MCError)?.code == .cancelled)
        #expect(output.write(bytes, maxLength: 3) == -1)
    }

    /// Apple's resource flow: Progress on both sides, the delegate's URL valid while it runs and
    /// the file gone afterwards unless the delegate moved it.
    @Test func resourcesArriveWithProgressAndAppleFileRules() async throws {
        let (alice, bob) = try Self.sessions()
        let scratch = NSTemporaryDirectory() + "mpcp-mc-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let delegate = ChannelDelegate(runLoop: nil)
        bob.delegate = delegate
        try await Self.connect(alice, bob)
        let content = Self.content(5 << 20, seed: 3)
        let source = URL(fileURLWithPath: scratch + "/report.pdf")
        try Data(content).write(to: source)

        let completed = Mutex<[(any Error)?]>([])
        let progress = try #require(alice.sendResource(at: source, withName: "report.pdf", toPeer: bob.myPeerID) { error in
            completed.withLock { $0.append(error) }
        })
        #expect(progress.totalUnitCount == Int64(content.count))
        #expect(try await eventually(seconds: 30) { completed.withLock { $0.count } == 1 })
        #expect(completed.withLock { $0[0] } == nil)
        #expect(progress.completedUnitCount == Int64(content.count) && progress.fractionCompleted == 1)
        try #require(try await eventually { delegate.finished.count == 1 })
        let (name, peer, url, error, existed) = delegate.finished[0]
        #expect(name == "report.pdf" && peer == alice.myPeerID && error == nil && existed)
        #expect(delegate.started.first?.2.totalUnitCount == Int64(content.count))
        #expect(delegate.started.first?.2.completedUnitCount == Int64(content.count))
        // Gone once the delegate returned (it did not move it).
        let received = try #require(url)
        #expect(try await eventually { !FileManager.default.fileExists(atPath: received.path) })

        // A delegate that moves the file keeps it.
        let keeper = ChannelDelegate(runLoop: nil, moveTo: scratch + "/kept.pdf")
        bob.delegate = keeper
        let again = Mutex<[(any Error)?]>([])
        _ = alice.sendResource(at: source, withName: "again.pdf", toPeer: bob.myPeerID) { error in again.withLock { $0.append(error) } }
        #expect(try await eventually(seconds: 30) { keeper.finished.count == 1 })
        #expect(try Data(contentsOf: URL(fileURLWithPath: scratch + "/kept.pdf")) == Data(content))
    }

    @Test func cancellingTheProgressStopsBothSides() async throws {
        let (alice, bob) = try Self.sessions()
        let scratch = NSTemporaryDirectory() + "mpcp-mc-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let delegate = ChannelDelegate(runLoop: nil)
        bob.delegate = delegate
        try await Self.connect(alice, bob)
        let source = URL(fileURLWithPath: scratch + "/big.bin")
        try Data(Self.content(8 << 20, seed: 4)).write(to: source)
        let engine = try #require(bob.engine)
        defer { engine.storageFault.withLockedValue { $0 = nil } }
        for receiverCancels in [false, true] {
            // Bob's first write waits until the cancel is made: it lands mid-transfer however
            // fast the link or late this task (before, a loaded run could finish 256 MiB first).
            let gate = WriteGate(at: 0)
            engine.storageFault.withLockedValue { $0 = { offset in gate.pass(offset) } }
            defer { gate.open() }
            let completed = Mutex<[(any Error)?]>([])
            // Counted before sending: the receiver's start can come before the next line runs.
            let index = delegate.started.count
            let progress = try #require(alice.sendResource(at: source, withName: "big", toPeer: bob.myPeerID) { error in
                completed.withLock { $0.append(error) }
            })
            // Under way: the receiver has started. (Not the Progress counts: Linux Foundation's
            // Progress takes no lock, and another thread's updates are not a reliable signal.)
            try #require(
                try await eventually(seconds: 30) { delegate.started.count == index + 1 },
                "round \(receiverCancels ? 2 : 1): started \(delegate.started.count), sent \(progress.completedUnitCount), completion \(completed.withLock { $0.map { "\(String(describing: $0))" } })")
            if receiverCancels { delegate.started[index].2.cancel() } else { progress.cancel() }
            gate.open()
            #expect(try await eventually(seconds: 20) { completed.withLock { $0.count } == 1 && delegate.finished.count == index + 1 })
            #expect((completed.withLock { $0[0] } as? MCError)?.code == .cancelled)
            #expect((delegate.finished[index].3 as? MCError)?.code == .cancelled && delegate.finished[index].2 == nil)
        }
    }

    @Test func theAsyncAPIStreamsAndSendsResources() async throws {
        let (alice, bob) = try Self.sessions()
        let scratch = NSTemporaryDirectory() + "mpcp-mc-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let events = bob.events()
        try await Self.connect(alice, bob)
        let content = Self.content(1 << 20, seed: 5)

        let writer = try alice.openStream(named: "chat", to: bob.myPeerID)
        let writing = Task {
            try await writer.write(Data(content))
            writer.close()
        }
        let reader = try await firstMatch(in: events) { event -> MCStreamReader? in
            if case .streamReceived(let reader, let peer) = event, peer == alice.myPeerID { return reader }
            return nil
        }
        #expect(reader.name == "chat")
        let received = try await withDeadline(seconds: 30) {
            var bytes = Data()
            for try await chunk in reader { bytes += chunk }
            return bytes
        }
        try await writing.value
        #expect(received == Data(content))

        let source = URL(fileURLWithPath: scratch + "/notes.txt")
        try Data(content).write(to: source)
        let reported = Mutex<Int64>(0)
        try await alice.sendResource(at: source, named: "notes.txt", to: bob.myPeerID) { sent, _ in reported.withLock { $0 = sent } }
        #expect(reported.withLock { $0 } == Int64(content.count))
        let url = try await firstMatch(in: events) { event -> URL? in
            if case .resourceReceived(let name, _, .success(let url)) = event, name == "notes.txt" { return url }
            return nil
        }
        // Without a delegate the file is the app's.
        #expect(try Data(contentsOf: url) == Data(content))
        try FileManager.default.removeItem(at: url)
    }

    /// http: resources are fetched with the system's HTTP client first, then sent and verified
    /// like files; a failed fetch is a clear error.
    @Test func resourcesFromHTTPURLs() async throws {
        let (alice, bob) = try Self.sessions()
        let events = bob.events()
        try await Self.connect(alice, bob)
        let content = Data(Self.content(3 << 20, seed: 8))
        let server = try await LoopbackHTTPServer(bodies: ["/photo.jpg": content])
        defer { Task { await server.close() } }
        try await alice.sendResource(at: server.url("/photo.jpg"), named: "photo.jpg", to: bob.myPeerID)
        let url = try await firstMatch(in: events) { event -> URL? in
            if case .resourceReceived("photo.jpg", _, .success(let url)) = event { return url }
            return nil
        }
        #expect(try Data(contentsOf: url) == content)
        try FileManager.default.removeItem(at: url)

        await #expect(throws: MCError.self) { try await alice.sendResource(at: server.url("/missing"), named: "x", to: bob.myPeerID) }
        let completed = Mutex<[(any Error)?]>([])
        let progress = alice.sendResource(at: URL(string: "ftp://127.0.0.1/x")!, withName: "x", toPeer: bob.myPeerID) { error in
            completed.withLock { $0.append(error) }
        }
        #expect(progress == nil)
        #expect(try await eventually { completed.withLock { $0.count } == 1 })
        #expect((completed.withLock { $0[0] } as? MCError)?.code == .invalidParameter)
    }

    /// The session's configuration reaches the channels: where files go and what is accepted.
    @Test func theConfigurationSetsTheResourceDirectoryAndLimits() async throws {
        let scratch = NSTemporaryDirectory() + "mpcp-mc-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        var configuration = MCSessionConfiguration.loopbackOnly
        configuration.resourceDirectory = URL(fileURLWithPath: scratch + "/inbox")
        configuration.maximumIncomingResourceSize = 100
        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: try Self.pki.peer("alice"), configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try Self.pki.peer("bob"), configuration: configuration)
        let events = bob.events()
        try await Self.connect(alice, bob)
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let small = URL(fileURLWithPath: scratch + "/small")
        let large = URL(fileURLWithPath: scratch + "/large")
        try Data(repeating: 1, count: 100).write(to: small)
        try Data(repeating: 2, count: 101).write(to: large)
        await #expect(throws: MCError.self) { try await alice.sendResource(at: large, named: "large", to: bob.myPeerID) }
        try await alice.sendResource(at: small, named: "small", to: bob.myPeerID)
        let url = try await firstMatch(in: events) { event -> URL? in
            if case .resourceReceived("small", _, .success(let url)) = event { return url }
            return nil
        }
        #expect(url.deletingLastPathComponent().path == scratch + "/inbox")
    }

    @Test func sendingToAStrangerFailsAtOnce() async throws {
        let (alice, _) = try Self.sessions()
        #expect(throws: MCError.self) { try alice.startStream(withName: "x", toPeer: MCPeerID(displayName: "nobody")) }
        let completed = Mutex<[(any Error)?]>([])
        let progress = alice.sendResource(at: URL(fileURLWithPath: "/etc/hostname"), withName: "x", toPeer: MCPeerID(displayName: "nobody")) { error in
            completed.withLock { $0.append(error) }
        }
        #expect(progress == nil)
        #expect(try await eventually { completed.withLock { $0.count } == 1 })
        #expect((completed.withLock { $0[0] } as? MCError)?.code == .notConnected)
    }
}
