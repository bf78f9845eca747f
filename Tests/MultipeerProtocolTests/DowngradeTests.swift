import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// An active attacker rewrites the clear-text preambles (security catalogue item 1).
@Suite("Downgrade resistance")
struct DowngradeTests {
    static let pki = try! TestPKI()
    static let alice = try! pki.peer("alice")

    /// Rewrites byte 6 (preference) and 7 (flags) of a direction's preamble.
    static func rewrite(dialerTo: (UInt8, UInt8)?, listenerTo: (UInt8, UInt8)?) -> (Bool, Int, [UInt8]) -> [UInt8] {
        { fromDialer, offset, bytes in
            guard offset == 0, bytes.count >= 8, let replacement = fromDialer ? dialerTo : listenerTo else { return bytes }
            var changed = bytes
            changed[6] = replacement.0
            changed[7] = replacement.1
            return changed
        }
    }

    private func expectBothFailWithoutPlaintext(_ pair: MachinePair, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(pair.dialerSide.established == nil, sourceLocation: sourceLocation)
        #expect(pair.listenerSide.established == nil, sourceLocation: sourceLocation)
        #expect(pair.dialerSide.delivered.isEmpty && pair.listenerSide.delivered.isEmpty, sourceLocation: sourceLocation)
        #expect(pair.dialerSide.closedWith != nil || pair.listenerSide.closedWith != nil, sourceLocation: sourceLocation)
    }

    @Test func strippingAnIdentityAndRewritingToNoneFails() throws {
        // Alice (optional, identity) dials Bob (optional). The attacker tells Bob that Alice said
        // none without identity, and tells Alice that Bob said none.
        var pair = try MachinePair.make(dialerPreference: .optional, dialerIdentity: Self.alice, listenerPreference: .optional)
        pair.tamper = Self.rewrite(dialerTo: (2, 0), listenerTo: (2, 0))
        pair.run()
        pair.deliverTransportCloses()
        expectBothFailWithoutPlaintext(pair)
    }

    @Test func requiredCannotBeRewrittenToPlaintext() throws {
        var pair = try MachinePair.make(dialerPreference: .required, listenerPreference: .optional)
        pair.tamper = Self.rewrite(dialerTo: (0, 0), listenerTo: (2, 0))
        pair.run()
        pair.deliverTransportCloses()
        expectBothFailWithoutPlaintext(pair)
        // The required side computed "refused" from the forged `none`, and said nothing past its preamble.
        #expect(pair.dialerSide.closedWith == ConnectionError(.encryptionIncompatible))
        #expect(pair.wireFromDialer.count == 8)
    }

    @Test func aChangedPreambleInsideTLSIsCaughtByTheEcho() throws {
        // Both still compute TLS, but the attacker flips optional to required on the way.
        var pair = try MachinePair.make(dialerPreference: .optional, listenerPreference: .optional)
        pair.tamper = Self.rewrite(dialerTo: (1, 0), listenerTo: nil)
        pair.run()
        pair.deliverTransportCloses()
        expectBothFailWithoutPlaintext(pair)
        #expect(pair.listenerSide.closedWith == ConnectionError(.downgradeDetected) || pair.dialerSide.closedWith == ConnectionError(.downgradeDetected))
        #expect(pair.listenerSide.trustRequests.isEmpty && pair.dialerSide.trustRequests.isEmpty)
    }

    @Test func claimingAnIdentityWithoutPresentingOneIsCaught() throws {
        // The attacker sets Alice's identity flag; her TLS client shows no certificate.
        var pair = try MachinePair.make(dialerPreference: .required, listenerPreference: .required)
        pair.tamper = Self.rewrite(dialerTo: (1, 1), listenerTo: nil)
        pair.run()
        pair.deliverTransportCloses()
        expectBothFailWithoutPlaintext(pair)
        #expect(pair.listenerSide.closedWith == ConnectionError(.downgradeDetected))
    }

    @Test func hidingAPresentedIdentityIsCaught() throws {
        // Alice has an identity; the attacker clears the flag so Bob would treat her as anonymous.
        var pair = try MachinePair.make(dialerPreference: .required, dialerIdentity: Self.alice, listenerPreference: .required)
        pair.tamper = Self.rewrite(dialerTo: (1, 0), listenerTo: nil)
        pair.run()
        pair.deliverTransportCloses()
        expectBothFailWithoutPlaintext(pair)
        #expect(pair.listenerSide.closedWith == ConnectionError(.downgradeDetected))
    }

    @Test func rewritingBothPreamblesWithoutIdentitiesIsStillCaughtByTheEcho() throws {
        var pair = try MachinePair.make(dialerPreference: .optional, listenerPreference: .optional)
        pair.tamper = Self.rewrite(dialerTo: (2, 0), listenerTo: (2, 0))
        pair.run()
        // Both compute plaintext, but each HELLO repeats the preambles as its sender saw them.
        #expect(pair.dialerSide.established == nil && pair.listenerSide.established == nil)
        #expect(pair.listenerSide.closedWith == ConnectionError(.downgradeDetected) || pair.dialerSide.closedWith == ConnectionError(.downgradeDetected))
    }

    /// SECURITY.md: optional with no identities cannot resist an active attacker. One who also
    /// rewrites the clear-text HELLO echoes gets a plaintext connection; this test shows it, so the
    /// document's warning stays true.
    @Test func anAttackerWhoAlsoRewritesTheClearHelloGetsPlaintextAsDocumented() throws {
        var pair = try MachinePair.make(dialerPreference: .optional, listenerPreference: .optional)
        // Stream offsets of the echoed preference bytes: preamble (8) + frame header (12) + 4, then
        // byte 6 of the dialer's and of the listener's preamble.
        let dialerPreference = 8 + 12 + 4 + 6
        let listenerPreference = dialerPreference + 8
        let preambles = Self.rewrite(dialerTo: (2, 0), listenerTo: (2, 0))
        pair.tamper = { fromDialer, offset, bytes in
            var changed = preambles(fromDialer, offset, bytes)
            // Make each echo match what the receiver saw: the dialer's says (none, optional) to
            // the listener, the listener's says (optional, none) to the dialer.
            let wanted: [Int: UInt8] = fromDialer ? [dialerPreference: 2, listenerPreference: 0] : [dialerPreference: 0, listenerPreference: 2]
            for (position, value) in wanted where position >= offset && position < offset + changed.count {
                changed[position - offset] = value
            }
            return changed
        }
        pair.run()
        #expect(pair.dialerSide.established?.isEncrypted == false)
        #expect(pair.listenerSide.established?.isEncrypted == false)
    }
}
