import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

@Suite("Secure channel handshake: every preference and identity pair (docs/PROTOCOL.md §4)")
struct HandshakeMatrixTests {
    typealias Case = HandshakeMatrix.Case
    static let cases = HandshakeMatrix.cases
    static let alice = HandshakeMatrix.alice
    static let bob = HandshakeMatrix.bob

    @Test(arguments: cases)
    func outcome(of testCase: Case) throws {
        var pair = try MachinePair.make(
            dialerPreference: testCase.dialer, dialerIdentity: testCase.dialerHasIdentity ? Self.alice : nil,
            listenerPreference: testCase.listener, listenerIdentity: testCase.listenerHasIdentity ? Self.bob : nil)
        pair.run()

        switch testCase.expected {
        case "refused":
            #expect(pair.dialerSide.closedWith == ConnectionError(.encryptionIncompatible))
            #expect(pair.listenerSide.closedWith == ConnectionError(.encryptionIncompatible))
            #expect(pair.dialerSide.trustRequests.isEmpty && pair.listenerSide.trustRequests.isEmpty)
            // Nothing but the two preambles ever crossed the wire.
            #expect(pair.wireFromDialer.count == 8 && pair.wireFromListener.count == 8)
        default:
            let encrypted = testCase.expected == "tls"
            let dialerView = try #require(pair.dialerSide.established)
            let listenerView = try #require(pair.listenerSide.established)
            #expect(dialerView.isEncrypted == encrypted)
            #expect(listenerView.isEncrypted == encrypted)
            #expect(dialerView.peer == bobPeer)
            #expect(listenerView.peer == alicePeer)
            // Each side is shown the other's chain exactly when the other has an identity.
            #expect(dialerView.certificateChain == (testCase.listenerHasIdentity ? Self.bob.certificateChain : nil))
            #expect(listenerView.certificateChain == (testCase.dialerHasIdentity ? Self.alice.certificateChain : nil))
            #expect(pair.dialerSide.trustRequests.count == 1 && pair.listenerSide.trustRequests.count == 1)
            #expect(dialerView.peerHello.listenPort == 40_000)
            #expect(listenerView.peerHello.datagramPort == 40_001)
            #expect(listenerView.peerHello.token == Bytes16(high: 1, low: 2))

            try pair.send(.message(ByteBuffer(string: "hi bob"), isEnd: true), fromDialer: true)
            try pair.send(.message(ByteBuffer(string: "hi alice"), isEnd: true), fromDialer: false)
            #expect(pair.listenerSide.delivered == [.message(ByteBuffer(string: "hi bob"), isEnd: true)])
            #expect(pair.dialerSide.delivered == [.message(ByteBuffer(string: "hi alice"), isEnd: true)])
            // With TLS the payload never crosses the wire in clear; without, it does.
            #expect(pair.wireFromDialer.contains(subsequence: Array("hi bob".utf8)) == !encrypted)
        }
    }
}
