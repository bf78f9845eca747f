import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOEmbedded
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Random interleavings of the application's writes and flushes, the peer's messages and PINGs
/// arriving whole or joined into one read, and answers written from inside a read: whatever the
/// order, TLS records leave in the order they were sealed, so the connection survives, and
/// every message arrives once, in the order it was written.
@Suite("Write order under shared records, replies and answers from inside a read")
struct WriteOrderPropertyTests {
    final class Log {
        var written: [String] = []
    }

    static func messages(_ events: [ConnectionEvent]) -> [String] {
        events.compactMap { event -> String? in
            guard case .frame(.message(let payload, true)) = event else { return nil }
            return String(buffer: payload)
        }
    }

    /// Moves what `from` has flushed to `to`: one read per buffer, or all joined into one read.
    static func move(from: EmbeddedChannel, to: EmbeddedChannel, joined: Bool) throws {
        let wire = try WriteCoalescingTests.flushed(from)
        guard !wire.isEmpty, to.isActive else { return }
        if joined {
            var all = ByteBuffer()
            for var part in wire { all.writeBuffer(&part) }
            try to.writeInbound(all)
        } else {
            for part in wire { try to.writeInbound(part) }
        }
    }

    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func everyMessageArrivesOnceAndInOrder(seed: UInt64) throws {
        let pair = try WriteCoalescingTests.connectedPair()
        let dialerLog = Log()
        try pair.dialer.pipeline.syncOperations.addHandler(ImmediateAnswer { dialerLog.written.append($0) })
        var listenerWritten: [String] = []
        var random = SeededGenerator(seed: seed)
        var heard: [String] = []  // what the listener received from the dialer
        var dialerHeard: [String] = []
        for step in 0..<400 {
            switch Int.random(in: 0..<8, using: &random) {
            case 0, 1:
                let text = "d\(step)"
                dialerLog.written.append(text)
                pair.dialer.write(Frame.message(ByteBuffer(string: text), isEnd: true), promise: nil)
            case 2:
                pair.dialer.flush()
            case 3:
                let text = Bool.random(using: &random) ? "trigger\(step)" : "l\(step)"
                listenerWritten.append(text)
                pair.listenerChannel.write(Frame.message(ByteBuffer(string: text), isEnd: true), promise: nil)
            case 4:
                pair.listenerChannel.write(Frame.ping(UInt64(step)), promise: nil)
            case 5:
                pair.listenerChannel.flush()
            case 6:
                try Self.move(from: pair.listenerChannel, to: pair.dialer, joined: Bool.random(using: &random))
            default:
                try Self.move(from: pair.dialer, to: pair.listenerChannel, joined: Bool.random(using: &random))
            }
            let listenerEvents = try EmbeddedPair.events(pair.listenerChannel)
            let dialerEvents = try EmbeddedPair.events(pair.dialer)
            #expect(!(listenerEvents + dialerEvents).contains { $0.closeError != nil }, "step \(step): \(listenerEvents + dialerEvents)")
            heard += Self.messages(listenerEvents)
            dialerHeard += Self.messages(dialerEvents)
        }
        pair.dialer.flush()
        pair.listenerChannel.flush()
        try pair.pump()
        heard += Self.messages(try EmbeddedPair.events(pair.listenerChannel))
        dialerHeard += Self.messages(try EmbeddedPair.events(pair.dialer))
        try pair.pump()  // answers to triggers that arrived last
        heard += Self.messages(try EmbeddedPair.events(pair.listenerChannel))
        #expect(heard == dialerLog.written)
        #expect(dialerHeard == listenerWritten)
        #expect(pair.dialer.isActive && pair.listenerChannel.isActive)
    }
}
