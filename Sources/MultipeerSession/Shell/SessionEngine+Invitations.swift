import MultipeerWire
import NIOCore
import NIOPosix
import MultipeerProtocol

/// How an invitation ended for the inviter (docs/PROTOCOL.md §7.2).
package enum InvitationOutcome: Sendable, Equatable {
    /// Accepted: the session is dialing the invitee with the connection data it sent; the
    /// peer's state events tell whether it connects.
    case accepted
    case declined
    /// The invitee's application did not answer in time, or no answer came at all.
    case timedOut
    case sessionFull
    case encryptionIncompatible
    /// No connection to any of the invitee's addresses, or it ended without an answer.
    case unreachable(String)
    /// The acceptance named another peer, or its connection data was not made for us.
    case invalidAnswer(String)
}

extension SessionEngine {
    /// Invites the advertiser at `endpoints` (from discovery) into this session: dials its
    /// invitation port, sends HELLO purpose 2 and INVITATION, and waits for the answer; on
    /// acceptance dials the accepting session with the connection data it sent (§7.2).
    /// `addresses` are socket addresses, so IPv6 link-local ones keep their interface.
    package func invite(
        _ peer: WirePeerID, at addresses: [SocketAddress], context: ByteBuffer, timeoutMilliseconds: UInt32
    ) -> EventLoopFuture<InvitationOutcome> {
        let invitation: Invitation
        do {
            invitation = try Invitation(timeoutMilliseconds: timeoutMilliseconds, context: context)
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        return eventLoop.flatSubmit { [self] in
            dialInvitation(peer, addresses: addresses[...], invitation: invitation, lastError: "no address to dial")
        }.map { [self] result in
            switch result {
            case .answered(let answer, let address): follow(answer, from: peer, via: address)
            case .failed(let outcome): outcome
            }
        }
    }

    /// Tries the addresses in order until one connects; what happens on that connection is the result.
    private func dialInvitation(
        _ peer: WirePeerID, addresses: ArraySlice<SocketAddress>, invitation: Invitation, lastError: String
    ) -> EventLoopFuture<InvitationDialResult> {
        guard let address = addresses.first else { return eventLoop.makeSucceededFuture(.failed(.unreachable(lastError))) }
        let answer = eventLoop.makePromise(of: InvitationDialResult.self)
        let connection = ConnectionConfiguration(
            role: .dialer, localPeer: configuration.localPeer, encryptionPreference: configuration.encryptionPreference,
            tls: configuration.tls, purpose: .invitation, recordsPerKeyUpdate: configuration.recordsPerKeyUpdate,
            expectedPeer: peer.identifier, invitation: invitation)
        let handshakeTimeout = configuration.handshakeTimeout
        return ClientBootstrap(group: eventLoop)
            .connectTimeout(handshakeTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(try ConnectionHandler(
                        configuration: connection, handshakeTimeout: handshakeTimeout, keepalive: nil))
                    try channel.pipeline.syncOperations.addHandler(InvitationAnswerHandler(address: address) { answer.succeed($0) })
                }
            }
            .connect(to: address)
            .flatMap { _ in answer.futureResult }
            .flatMapError { [self] error in
                // Not even connected: the next address may work.
                dialInvitation(peer, addresses: addresses.dropFirst(), invitation: invitation, lastError: "\(error)")
            }
    }

    /// On the loop: an acceptance is followed by a dial with its connection data, once it is
    /// checked to be the invitee's and made for us. Its link-local endpoints are on the link the
    /// invitation went over (§9.2).
    private func follow(_ answer: InvitationAnswer, from peer: WirePeerID, via address: SocketAddress) -> InvitationOutcome {
        switch answer.response {
        case .declined: return .declined
        case .timedOut: return .timedOut
        case .sessionFull: return .sessionFull
        case .encryptionIncompatible: return .encryptionIncompatible
        case .accepted:
            guard let data = answer.connectionData else { return .invalidAnswer("an acceptance without connection data") }
            guard data.peerID.identifier == peer.identifier else { return .invalidAnswer("the connection data was made by another peer") }
            guard data.forPeer == configuration.localPeer.identifier else { return .invalidAnswer("the connection data was made for another peer") }
            var linkScope: UInt32?
            if case .v6(let ipv6) = address, ipv6.address.sin6_scope_id != 0 { linkScope = ipv6.address.sin6_scope_id }
            connect(to: data, linkScope: linkScope)
            return .accepted
        }
    }
}

/// Hands the advertiser's answer on, or why none came, exactly once.
private final class InvitationAnswerHandler: ChannelInboundHandler {
    typealias InboundIn = ConnectionEvent
    private var report: ((InvitationDialResult) -> Void)?
    /// Where the invitation went.
    private let address: SocketAddress

    init(address: SocketAddress, report: @escaping (InvitationDialResult) -> Void) {
        self.address = address
        self.report = report
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .invitationAnswered(let answer): complete(.answered(answer, via: address))
        case .closed(let error) where error.code == .invitationEnded: break
        case .closed(let error) where error.code == .handshakeTimedOut: complete(.failed(.timedOut))
        case .closed(let error): complete(.failed(.unreachable("\(error)")))
        default: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        complete(.failed(.unreachable("the connection closed without an answer")))
        context.fireChannelInactive()
    }

    private func complete(_ result: InvitationDialResult) {
        let report = report
        self.report = nil
        report?(result)
    }
}

/// What one invitation connection came to.
enum InvitationDialResult: Sendable {
    case answered(InvitationAnswer, via: SocketAddress)
    case failed(InvitationOutcome)
}
