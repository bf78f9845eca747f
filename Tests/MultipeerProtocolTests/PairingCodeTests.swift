import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Synchronization
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// The pairing code (docs/PROTOCOL.md §7.3): equal on the two ends of one connection, fresh per
/// connection, and different on the two sides of a man in the middle, who gets one guess per
/// attempt because the dialer commits to its nonce before it sees the listener's.
@Suite("Pairing code (docs/PROTOCOL.md §7.3)")
struct PairingCodeTests {
    static let pki = try! TestPKI()

    /// Seeded random bytes, so every run of these tests is the same run.
    static func seeded(_ seed: UInt64) -> @Sendable (Int) -> [UInt8] {
        let generator = Mutex(SeededGenerator(seed: seed))
        return { count in generator.withLock { generator in (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) } } }
    }

    static func pair(
        dialer: WirePeerID, listener: WirePeerID, dialerSeed: UInt64, listenerSeed: UInt64, encrypted: Bool = true
    ) throws -> MachinePair {
        var dialerConfiguration = ConnectionConfiguration(
            role: .dialer, localPeer: dialer, encryptionPreference: encrypted ? .required : .none,
            tls: try TLSContext(identity: encrypted ? try pki.peer(dialer.displayName) : nil), token: Bytes16(high: 1, low: 2))
        dialerConfiguration.randomBytes = seeded(dialerSeed)
        var listenerConfiguration = ConnectionConfiguration(
            role: .listener, localPeer: listener, encryptionPreference: encrypted ? .required : .none,
            tls: try TLSContext(identity: encrypted ? try pki.peer(listener.displayName) : nil), listenPort: 40_000)
        listenerConfiguration.randomBytes = seeded(listenerSeed)
        return try MachinePair(dialer: dialerConfiguration, listener: listenerConfiguration)
    }

    static let mallory = try! WirePeerID(identifier: Bytes16(high: 0xBAD, low: 3), displayName: "mallory")

    @Test(arguments: [true, false])
    func bothEndsOfAConnectionShowTheSameCode(encrypted: Bool) throws {
        var pair = try Self.pair(dialer: alicePeer, listener: bobPeer, dialerSeed: 1, listenerSeed: 2, encrypted: encrypted)
        pair.run()
        let dialerCode = try #require(pair.dialerSide.trustRequests.first?.pairingCode)
        let listenerCode = try #require(pair.listenerSide.trustRequests.first?.pairingCode)
        #expect(dialerCode == listenerCode)
        #expect(dialerCode.count == 7 && dialerCode.filter(\.isNumber).count == 6)
    }

    /// The same two identities, connecting again: a new code, so no certificate can be ground
    /// in advance to match one (as the certificate-only comparison code allowed).
    @Test func eachConnectionHasItsOwnCode() throws {
        var codes = Set<String>()
        for run in 0..<20 {
            var pair = try Self.pair(dialer: alicePeer, listener: bobPeer, dialerSeed: 100 + UInt64(run), listenerSeed: 200 + UInt64(run))
            pair.run()
            codes.insert(try #require(pair.dialerSide.trustRequests.first?.pairingCode))
        }
        #expect(codes.count == 20)
    }

    /// Mallory sits between Alice (who dials) and Bob, with a connection to each. Whatever order
    /// she runs them in, she must send or commit her nonce before she learns what fixes the other
    /// side's code; 200 attempts end with different codes on Alice's and Bob's screens every time.
    @Test(arguments: [false, true])
    func aManInTheMiddleEndsWithDifferentCodes(bobFirst: Bool) throws {
        var matched = 0
        for attempt in 0..<200 {
            let seed = UInt64(attempt) * 4
            var toAlice = try Self.pair(dialer: alicePeer, listener: Self.mallory, dialerSeed: seed + 1, listenerSeed: seed + 2)
            var toBob = try Self.pair(dialer: Self.mallory, listener: bobPeer, dialerSeed: seed + 3, listenerSeed: seed + 4)
            if bobFirst {
                toBob.run()
                toAlice.run()
            } else {
                toAlice.run()
                toBob.run()
            }
            let aliceCode = try #require(toAlice.dialerSide.trustRequests.first?.pairingCode)
            let bobCode = try #require(toBob.listenerSide.trustRequests.first?.pairingCode)
            if aliceCode == bobCode { matched += 1 }
        }
        #expect(matched == 0)
    }

    /// The order is enforced: a listener nonce before the commitment, a second commitment, or a
    /// reveal that does not match the commitment each end the connection.
    @Test func theExchangeCannotBeReordered() throws {
        let nonce = try PairingNonce(bytes: [UInt8](repeating: 5, count: 32))
        let other = try PairingNonce(bytes: [UInt8](repeating: 6, count: 32))
        let commitment = try SHA256Digest(bytes: PairingCode.commitment(to: nonce.bytes))
        let preamble = try Preamble(maxVersion: WireLimits.maxProtocolVersion, encryptionPreference: .none, hasIdentity: false)
        let hello = try Hello(
            version: WireLimits.maxProtocolVersion, purpose: .connectionData,
            preambleEcho: Hello.echo(dialer: preamble, listener: preamble), token: Bytes16(high: 1, low: 2),
            listenPort: 0, datagramPort: 0, datagramReceiverID: 0, peerID: alicePeer)
        for frames in [
            [Frame.hello(hello), .pairingNonce(nonce)],
            [.hello(hello), .pairingCommit(commitment), .pairingCommit(commitment)],
            [.hello(hello), .pairingCommit(commitment), .pairingNonce(other)],
            [.hello(hello), .pairingCommit(commitment), .trust(.accepted)],
        ] {
            var machine = try ConnectionStateMachine(configuration: ConnectionConfiguration(
                role: .listener, localPeer: bobPeer, encryptionPreference: .none, tls: try TLSContext(identity: nil)))
            _ = machine.start()
            var bytes = ByteBuffer()
            preamble.encode(into: &bytes)
            for frame in frames { try frame.encode(into: &bytes) }
            var actions = machine.receive(bytes)
            // The session admits the HELLO; the frames after it are read then.
            #expect(actions.contains { if case .admissionRequested = $0 { true } else { false } })
            actions += machine.admitted(.admit)
            #expect(machine.isClosed, "\(frames.map(\.type))")
            #expect(!actions.contains { if case .evaluateTrust = $0 { true } else { false } })
        }
    }
}
