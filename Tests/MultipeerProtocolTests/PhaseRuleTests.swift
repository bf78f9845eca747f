import MultipeerCrypto
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// docs/PROTOCOL.md §7.1 and §6.4.6: a side may send GOODBYE before its HELLO.
@Suite("Frames allowed per phase")
struct PhaseRuleTests {
    func listenerAwaitingHello() throws -> ConnectionStateMachine {
        var listener = try ConnectionStateMachine(configuration: ConnectionConfiguration(
            role: .listener, localPeer: bobPeer, encryptionPreference: .none, tls: try TLSContext(identity: nil)))
        _ = listener.start()
        var preamble = ByteBuffer()
        try Preamble(encryptionPreference: .none, hasIdentity: false).encode(into: &preamble)
        _ = listener.receive(preamble)
        return listener
    }

    /// Before, an early GOODBYE was answered as a protocolError, hiding the peer's reason
    /// (the library itself sends GOODBYE 4 before HELLO when it detects a downgrade).
    @Test func goodbyeBeforeHelloReportsThePeersReason() throws {
        var listener = try listenerAwaitingHello()
        var bytes = ByteBuffer()
        try Frame.goodbye(.downgradeDetected).encode(into: &bytes)
        let actions = listener.receive(bytes)
        let closes = actions.compactMap { action -> ConnectionError? in
            if case .close(let error) = action { return error }
            return nil
        }
        #expect(closes == [ConnectionError(.peerSaidGoodbye(.downgradeDetected))])
        #expect(listener.isClosed)
    }

    @Test func anyOtherFrameBeforeHelloIsStillAViolation() throws {
        var listener = try listenerAwaitingHello()
        var bytes = ByteBuffer()
        try Frame.ping(1).encode(into: &bytes)
        let closed = listener.receive(bytes).contains { action in
            if case .close(let error) = action, error.code == .protocolViolation { return true }
            return false
        }
        #expect(closed)
    }
}
