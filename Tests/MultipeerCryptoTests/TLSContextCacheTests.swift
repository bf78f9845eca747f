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

        // Held weakly: once no session holds it, it goes, and the next one is new.
        weak let released = first
        first = nil
        second = nil
        #expect(released == nil)
        let again = try TLSContext.shared(identity: alice)
        #expect(again.identity === alice)
        #expect(TLSContext.sharedContextCount >= 1)
    }
}
