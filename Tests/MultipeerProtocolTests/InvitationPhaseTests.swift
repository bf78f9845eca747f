import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// The invitation connection (docs/PROTOCOL.md §7.2) between two state machines in memory:
/// HELLO purpose 2 and INVITATION, the advertiser's answer, then the end of the connection.
@Suite("Invitation phase (docs/PROTOCOL.md §7.2)")
struct InvitationPhaseTests {
    static let context = ByteBuffer(string: "join my game")

    static func pair(inviter: WireEncryptionPreference = .required, timeout: UInt32 = 30_000) throws -> MachinePair {
        try MachinePair(
            dialer: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: inviter, tls: try TLSContext(identity: nil),
                purpose: .invitation, expectedPeer: bobPeer.identifier,
                invitation: try Invitation(timeoutMilliseconds: timeout, context: context)),
            listener: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .optional, tls: try TLSContext(identity: nil)),
            admission: Advertiser<Int>.admission)
    }

    static let data = try! ConnectionData(
        encryptionPreference: .required, token: Bytes16(high: 5, low: 6), forPeer: alicePeer.identifier, peerID: bobPeer,
        certificateFingerprint: nil, endpoints: [try! WireEndpoint(address: .ipv4(0x7F00_0001), port: 4_000)])

    @Test(arguments: [WireEncryptionPreference.required, .optional, .none])
    func anAcceptanceCarriesConnectionDataAndEndsTheConnection(inviter: WireEncryptionPreference) throws {
        var pair = try Self.pair(inviter: inviter)
        pair.run()
        let request = try #require(pair.listenerSide.invitations.first)
        #expect(request.peer == alicePeer && request.invitation.context == Self.context)
        #expect(request.inviterPreamble.encryptionPreference == inviter)
        #expect(pair.dialerSide.awaitingAnswerMilliseconds == 30_000)
        #expect(pair.listenerSide.trustRequests.isEmpty && pair.dialerSide.trustRequests.isEmpty)
        let answer = try InvitationAnswer(.accepted, connectionData: Self.data)
        pair.apply(pair.listener.answerInvitation(answer), fromDialer: false)
        pair.pump()
        #expect(pair.dialerSide.invitationAnswers == [answer])
        #expect(pair.dialerSide.closedWith?.code == .invitationEnded && pair.listenerSide.closedWith?.code == .invitationEnded)
        #expect(pair.dialerSide.established == nil && pair.listenerSide.established == nil)
    }

    @Test(arguments: [InvitationResponse.declined, .sessionFull, .encryptionIncompatible])
    func otherAnswersReachTheInviter(response: InvitationResponse) throws {
        var pair = try Self.pair()
        pair.run()
        pair.apply(pair.listener.answerInvitation(try InvitationAnswer(response)), fromDialer: false)
        pair.pump()
        #expect(pair.dialerSide.invitationAnswers.map(\.response) == [response])
    }

    @Test func anUnansweredInvitationTimesOutOnBothSides() throws {
        var pair = try Self.pair()
        pair.run()
        pair.apply(pair.listener.invitationTimedOut(), fromDialer: false)
        pair.pump()
        #expect(pair.dialerSide.invitationAnswers.map(\.response) == [.timedOut])

        var silent = try Self.pair()
        silent.run()
        silent.apply(silent.dialer.invitationTimedOut(), fromDialer: true)
        #expect(silent.dialerSide.closedWith?.code == .handshakeTimedOut)
    }

    @Test func aSessionRefusesInvitationsAndAnAdvertiserEverythingElse() throws {
        var session = try MachinePair(
            dialer: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: try TLSContext(identity: nil),
                purpose: .invitation, invitation: try Invitation(timeoutMilliseconds: 1_000, context: ByteBuffer())),
            listener: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: try TLSContext(identity: nil)),
            admission: { $0.purpose == .invitation ? .refuse(.protocolError) : .admit })
        session.run()
        #expect(session.listenerSide.invitations.isEmpty && session.listener.isClosed)

        var advertiser = try MachinePair.make(listenerPreference: .optional, admission: { $0.purpose == .invitation ? .admit : .refuse(.protocolError) })
        advertiser.run()
        #expect(advertiser.listenerSide.trustRequests.isEmpty && advertiser.listener.isClosed)
    }

    /// In plaintext, so the test can write frames as the inviter.
    @Test(arguments: [Frame.invitation(try! Invitation(timeoutMilliseconds: 1, context: ByteBuffer())), .trust(.accepted), .message(ByteBuffer(), isEnd: true)])
    func anythingButPingAfterTheInvitationIsAViolation(frame: Frame) throws {
        var pair = try Self.pair(inviter: .none)
        pair.run()
        #expect(pair.listenerSide.invitations.count == 1)
        pair.inject(Self.encodedFrame(.ping(1)), fromDialer: true)
        #expect(!pair.listener.isClosed)
        pair.inject(Self.encodedFrame(frame), fromDialer: true)
        #expect(pair.listenerSide.closedWith?.code == .protocolViolation)
    }

    static func encodedFrame(_ frame: Frame) -> [UInt8] {
        var buffer = ByteBuffer()
        try! frame.encode(into: &buffer)
        return Array(buffer.readableBytesView)
    }
}
