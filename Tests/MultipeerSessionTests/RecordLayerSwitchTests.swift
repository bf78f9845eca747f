import Foundation
import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// The session suites run a second time in CI with `MULTIPEER_TLS_RECORD_LAYER=openssl`
/// (scripts/test): this checks that real connections then protect their records with the layer
/// the switch names, and with the guard's choice (the library's, on a tested OpenSSL) without
/// it. The line it prints is what scripts/test looks for.
@Suite("TLS record layer switch over real loopback sockets")
struct RecordLayerSwitchTests {
    @Test func connectionsUseTheLayerTheSwitchNames() async throws {
        let value = ProcessInfo.processInfo.environment[TLSRecordLayerPolicy.environmentVariable]
        let expected: TLSRecordLayerKind
        switch TLSRecordLayerPolicy.parse(value).policy {
        case .forced(let kind): expected = kind
        case .guarded, .comparedOnAnyRelease: expected = .library
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let harness = LoopbackHarness(group: group)
        let dialerLog = EventLog()
        let listenerLog = EventLog()
        let server = try await harness.listen(
            configuration: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .required, tls: try TLSContext(identity: nil)),
            log: listenerLog)
        let client = try await harness.dial(
            port: server.localAddress!.port!,
            configuration: ConnectionConfiguration(
                role: .dialer, localPeer: alicePeer, encryptionPreference: .required, tls: try TLSContext(identity: nil)),
            log: dialerLog)
        #expect(try await dialerLog.wait { $0.established != nil || $0.closed != nil })
        #expect(dialerLog.established?.isEncrypted == true)
        let used = try await client.eventLoop.submit {
            try client.pipeline.syncOperations.handler(type: ConnectionHandler.self).tlsEngine?.recordLayer
        }.get()
        #expect(used == expected)
        try await client.writeAndFlush(Frame.message(ByteBuffer(string: "through the switch"), isEnd: true)).get()
        #expect(try await listenerLog.wait { !$0.messages.isEmpty })
        print("TLS record layer in use by MultipeerSessionTests: \(used?.rawValue ?? "none")")
        try? await client.close().get()
        try? await server.close().get()
        try await group.shutdownGracefully()
    }
}
