import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// What the application sees when a peer's connection ends or cannot carry what it sends.
@Suite("Outcomes the application sees", .serialized)
struct AppVisibleOutcomeTests {
    /// A raw member of the victim, once the victim reports it connected.
    func rawPeer(of victim: EngineProbe) async throws -> (WirePeerID, any Channel, EventLog) {
        let member = try await RawMember.join(victim, name: "raw")
        #expect(try await eventually { victim.lastState(ofPeer: member.peer.identifier) == .connected })
        return (member.peer, member.channel, member.log)
    }

    /// Before, GOODBYE 7 on a connected link emptied connectedPeers at once but the app's last
    /// state stayed `connected` for the whole handshake deadline (10 s). Without link recovery
    /// it is reported at once; with it, GOODBYE 7 says another connection carries the peer now
    /// (docs/PROTOCOL.md §7.9), so the peer stays connected until the grace passes, then goes
    /// with that reason.
    @Test(arguments: [false, true])
    func goodbyeDuplicateOnAConnectedLinkIsReported(recovering: Bool) async throws {
        let grace = TimeAmount.seconds(1)
        let victim = try EngineProbe(name: "victim", recovery: recovering ? RecoveryPolicy(grace: grace) : .off)
        let (peer, channel, _) = try await rawPeer(of: victim)
        let closed = ContinuousClock.now
        try await channel.triggerUserOutboundEvent(ConnectionCommand.close(.duplicateConnection)).get()
        #expect(try await eventually(seconds: 5) {
            victim.lastState(ofPeer: peer.identifier) == .notConnected(ConnectionError(.peerSaidGoodbye(.duplicateConnection)))
        })
        let waited = ContinuousClock.now - closed
        if recovering {
            #expect(waited >= .seconds(1), "reported after \(waited), within the grace")
        } else {
            #expect(waited < .seconds(1), "reported after \(waited)")
        }
        await victim.shutdown()
    }

    /// Before, a message over 16 MiB closed the connection with no reason for the app.
    @Test func anOversizedMessageEndsTheConnectionWithItsReason() async throws {
        let victim = try EngineProbe(name: "victim")
        let (peer, channel, log) = try await rawPeer(of: victim)
        let fragment = ByteBuffer(repeating: 0x33, count: WireLimits.maxFramePayload)
        for _ in 0...(WireLimits.maxMessageSize / WireLimits.maxFramePayload) {
            channel.write(Frame.message(fragment, isEnd: false), promise: nil)
        }
        channel.flush()
        #expect(try await eventually(seconds: 10) {
            guard case .notConnected(let error?) = victim.lastState(ofPeer: peer.identifier),
                error.code == .protocolViolation, let violation = error.kind.wireError
            else { return false }
            return violation.code == .limitExceeded
        })
        // (The sender may not read the GOODBYE: closing with its data unread resets the socket.)
        #expect(try await log.wait { $0.closed != nil })
        await victim.shutdown()
    }

    /// Before, an unreliable send to a peer that announced no datagram port reported success and
    /// the data went nowhere.
    @Test func unreliableToAPeerWithoutADatagramPortIsRefused() async throws {
        let victim = try EngineProbe(name: "victim")
        let (peer, _, _) = try await rawPeer(of: victim)
        #expect(throws: SessionSendError.datagramsUnsupported([peer.identifier])) {
            try victim.engine.sendUnreliable(ByteBuffer(string: "lost?"), to: [peer.identifier])
        }
        // Reliable messages still go.
        try victim.engine.send(ByteBuffer(string: "kept"), to: [peer.identifier])
        await victim.shutdown()
    }
}
