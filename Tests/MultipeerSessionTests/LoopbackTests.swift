import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import ProtocolTestSupport
import Testing
import MultipeerProtocol

@Suite("Secure channel over real loopback sockets, with a man in the middle")
struct LoopbackTests {
    static let pki = try! TestPKI()
    static let alice = try! pki.peer("alice")
    static let bob = try! pki.peer("bob")

    static func configuration(_ role: ConnectionConfiguration.Role, _ preference: WireEncryptionPreference, _ identity: SecurityIdentity?) throws -> ConnectionConfiguration {
        ConnectionConfiguration(
            role: role, localPeer: role == .dialer ? alicePeer : bobPeer, encryptionPreference: preference,
            tls: try TLSContext(identity: identity))
    }

    /// Runs one connection through the proxy and returns both logs and the tap.
    static func run(
        dialer: (WireEncryptionPreference, SecurityIdentity?), listener: (WireEncryptionPreference, SecurityIdentity?),
        tamper: Tamper? = nil, message: String? = nil
    ) async throws -> (dialer: EventLog, listener: EventLog, tap: WireTap) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let harness = LoopbackHarness(group: group)
        let dialerLog = EventLog()
        let listenerLog = EventLog()
        let tap = WireTap()
        let server = try await harness.listen(configuration: configuration(.listener, listener.0, listener.1), log: listenerLog)
        let proxy = try await harness.proxy(to: server.localAddress!.port!, tap: tap, tamper: tamper)
        let client = try await harness.dial(port: proxy.localAddress!.port!, configuration: configuration(.dialer, dialer.0, dialer.1), log: dialerLog)
        _ = try await dialerLog.wait { $0.established != nil || $0.closed != nil }
        _ = try await listenerLog.wait { $0.established != nil || $0.closed != nil }
        if let message, dialerLog.established != nil {
            try await client.writeAndFlush(Frame.message(ByteBuffer(string: message), isEnd: true)).get()
            _ = try await listenerLog.wait { !$0.messages.isEmpty }
        }
        try? await client.close().get()
        try? await proxy.close().get()
        try? await server.close().get()
        try await group.shutdownGracefully()
        return (dialerLog, listenerLog, tap)
    }

    @Test func mutuallyAuthenticatedConnectionCarriesOnlyCiphertext() async throws {
        let secret = "the treasure is under the oak"
        let result = try await Self.run(dialer: (.required, Self.alice), listener: (.required, Self.bob), message: secret)
        #expect(result.dialer.established?.isEncrypted == true)
        #expect(result.listener.established?.certificateChain == Self.alice.certificateChain)
        #expect(result.listener.messages == [.message(ByteBuffer(string: secret), isEnd: true)])
        #expect(!result.tap.fromDialer.contains(subsequence: Array(secret.utf8)))
        // TLS 1.3 encrypts certificates and our HELLO: not even the names show on the wire.
        #expect(!result.tap.fromDialer.contains(subsequence: Array("alice".utf8)))
        #expect(!result.tap.fromListener.contains(subsequence: Array("bob".utf8)))
    }

    /// The tap does see plaintext when the peers agreed on none: proof that the check above can fail.
    @Test func theTapSeesPlaintextWhenNoEncryptionWasNegotiated() async throws {
        let secret = "the treasure is under the oak"
        let result = try await Self.run(dialer: (.none, nil), listener: (.none, nil), message: secret)
        #expect(result.dialer.established?.isEncrypted == false)
        #expect(result.tap.fromDialer.contains(subsequence: Array(secret.utf8)))
    }

    @Test(arguments: [
        // (dialer preference byte, flags byte) forced on the dialer's preamble
        (UInt8(2), UInt8(0)),  // required+identity rewritten to none, identity stripped
        (UInt8(0), UInt8(0)),  // rewritten to optional, identity stripped
        (UInt8(1), UInt8(0)),  // identity stripped only
    ])
    func rewritingThePreambleInFlightAbortsTheConnection(preference: UInt8, flags: UInt8) async throws {
        let tamper: Tamper = { fromDialer, offset, bytes in
            guard fromDialer, offset == 0, bytes.count >= 8 else { return bytes }
            var changed = bytes
            changed[6] = preference
            changed[7] = flags
            return changed
        }
        let result = try await Self.run(dialer: (.required, Self.alice), listener: (.optional, nil), tamper: tamper, message: "never")
        #expect(result.dialer.established == nil)
        #expect(result.listener.established == nil)
        #expect(result.listener.messages.isEmpty)
        #expect(result.dialer.closed != nil)
    }
}
