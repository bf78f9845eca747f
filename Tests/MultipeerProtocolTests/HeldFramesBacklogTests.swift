import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Frames TLS holds to share a record go out with the next reply, but they are the
/// application's, not a reply the peer provoked: only the reply's own record counts towards
/// the backlog that stops reading.
@Suite("Held frames and the reply backlog")
struct HeldFramesBacklogTests {
    static func connectedOverTLS() throws -> MachinePair {
        var pair = try MachinePair.make()  // both .required, no identities: TLS
        pair.run()
        #expect(pair.dialerSide.established?.isEncrypted == true && pair.listenerSide.established != nil)
        return pair
    }

    /// A TLS record's length on the wire for a frame alone in it.
    static func recordLength(_ frame: Frame) throws -> Int {
        var plaintext = ByteBuffer()
        try frame.encode(into: &plaintext)
        return plaintext.readableBytes + 5 + 1 + 16
    }

    /// Holds two application frames on the dialer (nothing written yet).
    static func holdTwoMessages(_ pair: inout MachinePair) throws {
        for text in ["first held", "second held"] {
            let sent = try pair.dialer.send(.message(ByteBuffer(string: text), isEnd: true), coalescing: true)
            #expect(sent.isEmpty)
        }
    }

    static func sentBytes(_ actions: [ConnectionAction]) -> Int {
        actions.reduce(0) { total, action in
            if case .send(let bytes) = action { return total + bytes.readableBytes }
            return total
        }
    }

    @Test func aPongCountsItsOwnRecordOnly() throws {
        var pair = try Self.connectedOverTLS()
        try Self.holdTwoMessages(&pair)
        // The listener's PING, by hand, so that the dialer's answer can be inspected.
        let ping = try pair.listener.send(.ping(42))
        var wire = ByteBuffer()
        for case .send(var bytes) in ping { wire.writeBuffer(&bytes) }
        let before = pair.dialer.replyByteCount
        let answer = pair.dialer.receive(wire)
        let pong = try Self.recordLength(.pong(42))
        #expect(pair.dialer.replyByteCount - before == pong)
        #expect(Self.sentBytes(answer) > pong)  // the held frames went out with it
        pair.apply(answer, fromDialer: true)
        pair.pump()
        let messages = pair.listenerSide.delivered.compactMap { frame -> String? in
            if case .message(let payload, true) = frame { return String(buffer: payload) }
            return nil
        }
        #expect(messages == ["first held", "second held"])
    }

    @Test func aRefusalCountsItsOwnRecordOnly() throws {
        var pair = try Self.connectedOverTLS()
        try pair.send(.streamOpen(channel: 2, name: "unwanted"), fromDialer: false)  // the listener opens even channels
        #expect(pair.dialerSide.delivered.contains { if case .streamOpen(2, _) = $0 { true } else { false } })
        try Self.holdTwoMessages(&pair)
        let before = pair.dialer.replyByteCount
        let refusal = Frame.streamReset(channel: 2, code: .refused)
        let sent = try pair.dialer.send(refusal, coalescing: true)
        #expect(pair.dialer.replyByteCount - before == (try Self.recordLength(refusal)))
        #expect(Self.sentBytes(sent) > (try Self.recordLength(refusal)))  // not held, and the held frames with it
        pair.apply(sent, fromDialer: true)
        pair.pump()
        #expect(pair.listenerSide.delivered.contains { if case .streamReset(2, .refused) = $0 { true } else { false } })
        #expect(pair.listenerSide.closedWith == nil && pair.dialerSide.closedWith == nil)
    }
}
