import MultipeerCrypto
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// A bulk frame is four whole TLS records, and the receiver opens all but the first straight
/// into the frame's payload: no record of it is opened aside and copied but the one that
/// carries the header.
@Suite("Bulk frames as whole TLS records")
struct WholeRecordFrameTests {
    @Test func aLargeMessageIsSentInWholeRecordsAndOpenedWithOneCopyPerFrame() throws {
        var pair = try MachinePair.make()  // both .required, no identities: TLS
        pair.run()
        #expect(pair.dialerSide.established?.isEncrypted == true && pair.listenerSide.established != nil)
        let listenerEngine = try #require(pair.listener.tlsEngine)
        let asideBefore = listenerEngine.recordsOpenedAside
        let wireBefore = pair.wireFromDialer.count

        var message = ByteBuffer()
        for index in 0..<(1 << 20) { message.writeInteger(UInt8(truncatingIfNeeded: index &* 31)) }
        let fragments = try Frame.messageFragments(of: message)
        for fragment in fragments { try pair.send(fragment, fromDialer: true) }

        // 16 frames of 65,536 bytes with their headers, each four full records, and the rest.
        #expect(fragments.count == 17)
        let fullFrames = (1 << 20) / Frame.largestSentPayload
        let rest = (1 << 20) - fullFrames * Frame.largestSentPayload
        let records = fullFrames * 4 + 1
        #expect(pair.wireFromDialer.count - wireBefore == (1 << 20) + fragments.count * WireLimits.frameHeaderLength + records * 22)
        #expect(rest == 192)

        var received = ByteBuffer()
        for case .message(var payload, _) in pair.listenerSide.delivered { received.writeBuffer(&payload) }
        #expect(received == message)
        #expect(listenerEngine.recordsOpenedAside - asideBefore == fragments.count)
        #expect(pair.listenerSide.closedWith == nil)
    }
}
