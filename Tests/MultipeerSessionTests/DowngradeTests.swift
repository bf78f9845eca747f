import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

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

    @Test func withoutIdentitiesOrRequiredAFullRewriteGivesPlaintextAsDocumented() throws {
        // SECURITY.md: optional with no identities cannot resist an active attacker.
        var pair = try MachinePair.make(dialerPreference: .optional, listenerPreference: .optional)
        pair.tamper = Self.rewrite(dialerTo: (2, 0), listenerTo: (2, 0))
        pair.run()
        // Both believe the other said none: plaintext, but the HELLO echo still disagrees with what
        // each side sent, so even this rewrite is caught when the attacker does not also fix HELLO.
        #expect(pair.dialerSide.established == nil && pair.listenerSide.established == nil)
    }
}
