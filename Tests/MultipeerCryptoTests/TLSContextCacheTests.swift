import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// Sessions that present the same identity share one TLS context while any of them holds it.
@Suite("TLS contexts shared per identity")
struct TLSContextCacheTests {
    @Test func oneContextPerIdentityWhileHeldAndNoneForEphemeralOnes() throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice")
        var first: TLSContext? = try TLSContext.shared(identity: alice)
        var second: TLSContext? = try TLSContext.shared(identity: alice)
        #expect(first === second)
        #expect(first?.identity === alice)
        #expect(try TLSContext.shared(identity: try pki.peer("bob")) !== first)
        // Without an identity each context has an ephemeral certificate of its own.
        #expect(try TLSContext.shared(identity: nil) !== TLSContext.shared(identity: nil))

        // Kept for the grace after its last hand-out, then let go; the next one is new.
        weak let released = first
        first = nil
        second = nil
        #expect(released != nil)
        let again = try TLSContext.shared(identity: alice)
        #expect(again.identity === alice)
        #expect(TLSContext.sharedContextCount >= 1)
    }

    /// A session made right after another with the same identity finds its context; once the
    /// grace has passed with nobody holding it, it goes (and OpenSSL's copy of the key with it).
    @Test func aReleasedContextLingersForTheGraceThenGoes() async throws {
        let pki = try TestPKI()
        let carol = try pki.peer("carol")
        TLSContext.sharedContextGrace = .milliseconds(200)
        defer { TLSContext.sharedContextGrace = TLSContext.defaultSharedContextGrace }
        var held: TLSContext? = try TLSContext.shared(identity: carol)
        weak let released = held
        held = nil
        #expect(released != nil)
        #expect(try TLSContext.shared(identity: carol) === released)
        let deadline = ContinuousClock.now + .seconds(10)
        while released != nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(released == nil)
    }
}
