import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import Testing
@testable import MultipeerProtocol
@testable import MultipeerSession

/// A stream's two ends across a lost link, fed by hand (docs/PROTOCOL.md §7.10): what the writer
/// keeps and sends again, and how the reader counts the bytes it held from the old connection.
@Suite("Stream endpoints across a lost link")
struct StreamEndpointResumptionTests {
    typealias Linkage = ResourceReceiverTests.Linkage

    static let peer = try! WirePeerID(identifier: .random(), displayName: "peer")

    static func bytes(_ range: Range<Int>) -> ByteBuffer { ByteBuffer(bytes: range.map { UInt8(truncatingIfNeeded: $0 % 251) }) }

    /// Drains the writer at `allowance` a frame; the payloads, in order.
    static func drain(_ writer: ByteStreamWriter, allowance: Int = 1_000) -> (data: [UInt8], closed: Bool) {
        var data: [UInt8] = []
        while true {
            switch writer.nextOutput(allowance: allowance) {
            case .data(let slice): data += slice.readableBytesView
            case .finish: return (data, true)
            case .idle, .blocked: return (data, false)
            }
        }
    }

    /// Sent 10,000 bytes and closed; the peer had 3,000 acknowledged and 6,500 when the link went.
    /// The answer rewinds to 6,500: the writer sends 6,500..<10,000 again, in order, then the close,
    /// and `finish()`'s success stands.
    @Test func aResumedWriterSendsWhatThePeerLackedInOrderThenItsClose() async throws {
        let writer = ByteStreamWriter(name: "s", peer: Self.peer, bufferLimit: 1 << 20)
        writer.retain(as: 0)
        let old = Linkage()
        #expect(writer.bind(channel: 1, linkage: old))
        let written = Task { try await writer.write(Self.bytes(0..<10_000)) }
        try await written.value
        writer.close()
        // The close is handed over after the data: finish() returns then.
        let first = Self.drain(writer)
        #expect(first.data == Array(Self.bytes(0..<10_000).readableBytesView) && first.closed)
        try await withDeadline(seconds: 5) { try await writer.finish() }
        writer.acknowledged(released: 3_000, rewound: 0, answering: false)
        writer.interrupt()
        #expect(writer.nextOutput(allowance: 1_000).isIdle)
        #expect(writer.bind(channel: 3, linkage: Linkage()))
        writer.acknowledged(released: 3_500, rewound: 3_500, answering: true)
        // A failure now (the member leaving) does not turn the app's success into one, nor stop
        // what the peer still lacks from going while the link is there.
        writer.failed(TransferError(.connectionLost))
        #expect(writer.failure == nil)
        let again = Self.drain(writer)
        #expect(again.data == Array(Self.bytes(6_500..<10_000).readableBytesView))
        #expect(again.closed)
        #expect(writer.nextOutput(allowance: 1_000).isIdle)
    }

    /// Bytes held from the old connection give no window back on the new one, and the answer to
    /// the peer's resume waits until the application has read them.
    @Test func aResumedReaderAnswersOnceItsOldBytesAreRead() async throws {
        let old = Linkage()
        let reader = ByteStreamReader(name: "s", peer: Self.peer, channel: 1, linkage: old, ordinal: 0)
        reader.peerSent(.streamData(channel: 1, Self.bytes(0..<5_000)))
        var buffer = [UInt8](repeating: 0, count: 1_000)
        #expect(buffer.withUnsafeMutableBytes { reader.read(into: $0) } == 1_000)
        #expect(old.taken.withLock { $0 } == 1_000)
        let new = Linkage()
        let answered = Flag()
        #expect(reader.rebind(channel: 3, linkage: new) { answered.set() })
        #expect(!answered.isSet)
        // 4,000 stale bytes: reading them returns no window on the new channel, and only the
        // last of them lets the answer go.
        for _ in 0..<3 { _ = buffer.withUnsafeMutableBytes { reader.read(into: $0) } }
        #expect(!answered.isSet && new.taken.withLock { $0 } == 0)
        reader.peerSent(.streamData(channel: 3, Self.bytes(5_000..<5_600)))
        #expect(buffer.withUnsafeMutableBytes { reader.read(into: $0) } == 1_000)
        #expect(answered.isSet)
        #expect(new.taken.withLock { $0 } == 0)
        var rest = [UInt8](repeating: 0, count: 600)
        #expect(rest.withUnsafeMutableBytes { reader.read(into: $0) } == 600)
        #expect(new.taken.withLock { $0 } == 600)
        #expect(rest == Array(Self.bytes(5_000..<5_600).readableBytesView))
    }

    /// A reader with nothing held answers at once; one cancelled while the link was down does not
    /// take the stream on (its caller resets it).
    @Test func aReaderWithNothingHeldAnswersAtOnceAndACancelledOneRefuses() {
        let reader = ByteStreamReader(name: "s", peer: Self.peer, channel: 1, linkage: Linkage(), ordinal: 0)
        let answered = Flag()
        #expect(reader.rebind(channel: 3, linkage: Linkage()) { answered.set() })
        #expect(answered.isSet)

        let cancelled = ByteStreamReader(name: "s", peer: Self.peer, channel: 1, linkage: Linkage(), ordinal: 1)
        cancelled.cancel()
        #expect(!cancelled.rebind(channel: 5, linkage: Linkage()) {})
    }
}

final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

extension ChannelOutput {
    var isIdle: Bool {
        if case .idle = self { return true }
        return false
    }
}
