import MultipeerProtocol
import MultipeerSession
import MultipeerWire
import NIOCore
import NIOEmbedded
import Testing

/// NIO reads what a socket still holds, from inside a write that failed, before it closes the
/// channel (`BaseSocketChannel.flushNow`). The engine writes while it handles a frame the handler
/// is delivering, so a read and the close can arrive in the middle of the handler's delivery. They
/// must wait for it: frames reach the session in the order the peer sent them, and the close last.
@Suite("ConnectionHandler: reads that arrive while it is delivering")
struct ConnectionHandlerReentryTests {
    /// Records are sent one per message, as a peer that writes each message at once does.
    static func records(_ pair: EmbeddedPair, _ texts: [String]) throws -> [ByteBuffer] {
        var records: [ByteBuffer] = []
        for text in texts {
            pair.listenerChannel.write(Frame.message(ByteBuffer(string: text), isEnd: true), promise: nil)
            pair.listenerChannel.flush()
            var joined = ByteBuffer()
            for var bytes in try WriteCoalescingTests.flushed(pair.listenerChannel) { joined.writeBuffer(&bytes) }
            records.append(joined)
        }
        return records
    }

    static func joined(_ buffers: ArraySlice<ByteBuffer>) -> ByteBuffer {
        var joined = ByteBuffer()
        for var buffer in buffers { joined.writeBuffer(&buffer) }
        return joined
    }

    @Test(arguments: [false, true])
    func aReadDuringDeliveryWaitsForIt(thenClosed: Bool) throws {
        let pair = try WriteCoalescingTests.connectedPair()
        let records = try Self.records(pair, (0..<6).map { "m\($0)" })
        // The first read holds m0 to m2; while m0 is handed on, NIO drains m3 to m5 (and closes).
        let nested = NestedRead(trigger: "m0", bytes: Self.joined(records[3...]), thenClosed: thenClosed)
        try pair.dialer.pipeline.syncOperations.addHandler(nested, position: .after(try pair.dialer.pipeline.syncOperations.handler(type: ConnectionHandler.self)))
        try pair.dialer.writeInbound(Self.joined(records[..<3]))
        #expect(nested.fired)
        let events = try EmbeddedPair.events(pair.dialer)
        let messages = events.compactMap { event -> String? in
            guard case .frame(.message(let payload, true)) = event else { return nil }
            return String(buffer: payload)
        }
        #expect(messages == (0..<6).map { "m\($0)" })
        if thenClosed {
            #expect(events.last?.closeError == ConnectionError(.connectionClosed), "\(events)")
            #expect(events.filter { $0.closeError != nil }.count == 1)
        } else {
            #expect(!events.contains { $0.closeError != nil }, "\(events)")
        }
    }
}

/// On the frame `trigger`, feeds `bytes` to the pipeline from inside its own channelRead, and
/// then the channel's end when `thenClosed`: what NIO does when a write fails mid-delivery.
final class NestedRead: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    typealias InboundOut = ConnectionEvent
    private let trigger: String
    private let bytes: ByteBuffer
    private let thenClosed: Bool
    private(set) var fired = false

    init(trigger: String, bytes: ByteBuffer, thenClosed: Bool) {
        self.trigger = trigger
        self.bytes = bytes
        self.thenClosed = thenClosed
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        guard !fired, case .frame(.message(let payload, true)) = unwrapInboundIn(data), String(buffer: payload) == trigger else { return }
        fired = true
        context.pipeline.syncOperations.fireChannelRead(NIOAny(bytes))
        if thenClosed { context.pipeline.syncOperations.fireChannelInactive() }
    }
}
