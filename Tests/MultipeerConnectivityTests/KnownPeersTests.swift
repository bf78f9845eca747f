import Foundation
@testable import MultipeerConnectivity
import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import Testing
import MultipeerProtocol

@Suite("Peer objects the session keeps", .serialized)
struct KnownPeersTests {
    /// Before, every refused HELLO added a peer object for good: strangers grew the table.
    @Test func refusedStrangersAreNotRemembered() async throws {
        let victim = MCSession(peer: MCPeerID(displayName: "victim"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let data = try await victim.nearbyConnectionData(forPeer: MCPeerID(displayName: "friend"))
        let port = Int(try ConnectionData.decode(ByteBuffer(bytes: data)).endpoints[0].port)
        let events = victim.events()
        let strangers = 100
        let tls = try TLSContext(identity: nil)
        for index in 0..<strangers {
            let configuration = ConnectionConfiguration(
                role: .dialer, localPeer: try WirePeerID(identifier: .random(), displayName: "stranger\(index)"),
                encryptionPreference: .required, tls: tls, purpose: .connectionData, token: .random())
            _ = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ConnectionHandler(configuration: configuration))
                    }
                }
                .connect(host: "127.0.0.1", port: port).get()
        }
        let refused = try await withDeadline(seconds: 20) {
            var count = 0
            for await event in events {
                if case .connectionRefused = event { count += 1 }
                if count == strangers { break }
            }
            return count
        }
        #expect(refused == strangers)
        #expect(victim.activePeerObjectCount == 0)
        await victim.disconnectAndWait()
    }
}
