import CMultipeerOpenSSL
import Foundation
import Logging
@testable import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// Which key exchange two peers end up with (docs/PROTOCOL.md §5): the hybrid X25519MLKEM768
/// when both sides' OpenSSL has it (3.5 and later), X25519 otherwise.
@Suite("Key exchange groups")
struct KeyExchangeGroupTests {
    /// The system's OpenSSL 3.0 has no ML-KEM; the second configuration (scripts/test-openssl 3.5) has.
    @Test func theLinkedOpenSSLDecidesWhetherMLKEMIsOffered() {
        let version = CryptoRuntime.openSSLVersion.split(separator: " ").dropFirst().first.map(String.init) ?? ""
        let parts = version.split(separator: ".").compactMap { Int($0) }
        let atLeast35 = parts.count >= 2 && (parts[0], parts[1]) >= (3, 5)
        #expect(TLSContext.offersPostQuantumKeyExchange == atLeast35, "\(CryptoRuntime.openSSLVersion)")
    }

    @Test func twoLibraryPeersUseTheBestGroupBothHave() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil)
        try pair.handshake()
        let expected = TLSContext.offersPostQuantumKeyExchange ? "X25519MLKEM768" : "x25519"
        #expect(pair.client.negotiatedGroup == expected)
        #expect(pair.server.negotiatedGroup == expected)
    }

    /// The group is logged at debug level when the handshake completes, so that a run against
    /// another TLS stack (scripts/pq-interop) can read it off the session's log.
    @Test func theGroupIsLoggedWhenTheHandshakeCompletes() throws {
        let lines = LogLines()
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, logger: lines.logger)
        try pair.handshake()
        let expected = TLSContext.offersPostQuantumKeyExchange ? "X25519MLKEM768" : "x25519"
        let completions = lines.all.filter { $0.level == .debug && $0.text.hasPrefix("TLS handshake complete ") }.map(\.text)
        #expect(completions.count == 2, "\(completions)")
        for role in ["client", "server"] {
            #expect(completions.contains { $0.contains("group=\(expected) ") && $0.contains("role=\(role)") }, "\(completions)")
        }
    }

    /// A peer whose OpenSSL has no ML-KEM (3.0's groups) still agrees with us, on X25519.
    @Test func aPeerWithoutMLKEMGetsX25519() throws {
        let identity = try SecurityIdentity.ephemeral()
        let raw = try RawTLSPeer(role: .server, groups: "X25519:P-256", certificate: identity.certificate, key: identity.privateKey.pkey)
        let client = try TLSEngine(context: TLSContext(identity: nil), role: .client)
        let outcome = raw.handshake(with: client)
        #expect(outcome.engineError == nil)
        #expect(client.negotiatedGroup == "x25519")
    }
}
