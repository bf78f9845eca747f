import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Synchronization
import ProtocolTestSupport
import Testing

@testable import MultipeerSession
@testable import MultipeerProtocol

/// Issue 28, hole 1: one host on the LAN held all 16 of the advertiser's places with idle
/// connections, reopened before their 10 s handshake deadline, and every real invitation was
/// closed at accept. The attacker here speaks from 127.0.0.2, the inviter from 127.0.0.1.
@Suite("Invitation listener under a flood", .serialized)
struct InvitationListenerFloodTests {
    @Test func anInvitationGetsThroughIdleConnectionsFromAnotherHost() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let asked = Mutex(0)
        let advertiser = try WirePeerID(identifier: .random(), displayName: "advertiser")
        let listener = try await InvitationListener.bind(
            host: "127.0.0.1", localPeer: advertiser, eventLoop: MultiThreadedEventLoopGroup.singleton.next()
        ) { _, reply in
            asked.withLock { $0 += 1 }
            reply.decline()
        }
        let port = try #require(listener.port)
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)

        // 64 idle connections, each opened again as soon as it is closed.
        let open = Mutex(0)
        let stopped = Atomic<Bool>(false)
        @Sendable func idle() {
            guard !stopped.load(ordering: .relaxed) else { return }
            ClientBootstrap(group: group).bind(to: try! SocketAddress(ipAddress: "127.0.0.2", port: 0)).connect(to: target)
                .whenSuccess { channel in
                    open.withLock { $0 += 1 }
                    channel.closeFuture.whenComplete { _ in idle() }
                }
        }
        for _ in 0..<64 { idle() }
        // Past 64 opens the listener is shedding them and they are coming back.
        #expect(try await eventually(seconds: 10) { open.withLock { $0 } >= 128 })

        let inviter = try EngineProbe(name: "inviter")
        let outcome = try await inviter.engine.invite(
            advertiser, at: [target], context: ByteBuffer(), timeoutMilliseconds: 10_000
        ).get()
        #expect(outcome == .declined)
        #expect(asked.withLock { $0 } == 1)

        stopped.store(true, ordering: .relaxed)
        await inviter.shutdown()
        await listener.close()
        try await group.shutdownGracefully()
    }

    /// Without the per-source limit, a host whose invitations wait on the app (the most advanced
    /// stage, and silent) fills all 16 places; reconnecting as they are shed, its newcomers then
    /// shed a real inviter that is still in its handshake.
    @Test func anInvitationGetsThroughInvitationsFromAnotherHostThatTheAppLeavesUnanswered() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let advertiser = try WirePeerID(identifier: .random(), displayName: "advertiser")
        let waiting = Mutex(0)
        let listener = try await InvitationListener.bind(
            host: "127.0.0.1", localPeer: advertiser, eventLoop: MultiThreadedEventLoopGroup.singleton.next()
        ) { request, reply in
            // The attacker's invitations are left to wait, as a slow user would.
            guard request.peer.displayName == "inviter" else { return waiting.withLock { $0 += 1 } }
            reply.decline()
        }
        let port = try #require(listener.port)
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let attacker = try WirePeerID(identifier: .random(), displayName: "attacker")
        let configuration = ConnectionConfiguration(
            role: .dialer, localPeer: attacker, encryptionPreference: .none, tls: try TLSContext(identity: nil),
            purpose: .invitation, invitation: try Invitation(timeoutMilliseconds: 120_000, context: ByteBuffer()))
        let stopped = Atomic<Bool>(false)
        let opened = Mutex(0)
        @Sendable func invite() {
            guard !stopped.load(ordering: .relaxed) else { return }
            ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(try ConnectionHandler(configuration: configuration, keepalive: nil))
                    }
                }
                .bind(to: try! SocketAddress(ipAddress: "127.0.0.2", port: 0)).connect(to: target)
                .whenSuccess { channel in
                    opened.withLock { $0 += 1 }
                    channel.closeFuture.whenComplete { _ in invite() }
                }
        }
        for _ in 0..<64 { invite() }
        // The attacker's connections are being shed and coming back; some reached the app.
        #expect(try await eventually(seconds: 10) { waiting.withLock { $0 } >= 1 && opened.withLock { $0 } >= 120 })

        let inviter = try EngineProbe(name: "inviter", preference: .none)
        // Several in a row, each of which a newcomer could have shed mid-handshake.
        for _ in 0..<5 {
            let outcome = try await inviter.engine.invite(advertiser, at: [target], context: ByteBuffer(), timeoutMilliseconds: 10_000).get()
            #expect(outcome == .declined)
        }

        stopped.store(true, ordering: .relaxed)
        await inviter.shutdown()
        await listener.close()
        try await group.shutdownGracefully()
    }

    @Test func anAdvertiserWaitsForItsAppNoLongerThanItsCap() throws {
        let invitation = try Invitation(timeoutMilliseconds: WireLimits.invitationTimeoutMilliseconds.upperBound, context: ByteBuffer())
        let peer = try WirePeerID(identifier: .random(), displayName: "inviter")
        let request = InvitationRequest(peer: peer, invitation: invitation, inviterPreamble: try Preamble(encryptionPreference: .optional, hasIdentity: false))
        #expect(request.answerWait == InvitationTiming.maximumAnswerWait)
        let short = InvitationRequest(
            peer: peer, invitation: try Invitation(timeoutMilliseconds: 5_000, context: ByteBuffer()),
            inviterPreamble: try Preamble(encryptionPreference: .optional, hasIdentity: false))
        #expect(short.answerWait == .seconds(5))
    }
}
