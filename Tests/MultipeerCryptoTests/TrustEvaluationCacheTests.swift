import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import Testing

@Suite("Trust evaluation cache")
struct TrustEvaluationCacheTests {
    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    /// An evaluation with a cache of its own, so tests running at the same time do not share hits.
    private func evaluation(_ cache: TrustEvaluationCache, anchors: [Certificate]? = nil, depth: Int = 4, at time: Date? = nil) -> TrustEvaluation {
        var evaluation = TrustEvaluation(anchors: anchors ?? [pki.root], maximumDepth: depth, validationTime: time)
        evaluation.cache = cache
        return evaluation
    }

    private func failure(_ outcome: TrustEvaluation.Outcome) -> TrustEvaluation.Failure.Reason? {
        if case .untrusted(let failure) = outcome { return failure.reason }
        return nil
    }

    @Test func evaluationsShareOneCacheByDefault() {
        #expect(TrustEvaluation(anchors: [pki.root]).cache === TrustEvaluationCache.shared)
    }

    @Test func aTrustedChainIsVerifiedOnce() throws {
        let cache = TrustEvaluationCache()
        let alice = try pki.peer("alice")
        #expect(evaluation(cache).evaluate(alice.certificateChain) == .trusted)
        #expect(cache.hits == 0)
        #expect(cache.count == 1)
        // The same certificates parsed again, as a reconnecting peer's are.
        let again = try alice.certificateChain.map { try Certificate(derEncoded: $0.derEncoded) }
        #expect(evaluation(cache).evaluate(again) == .trusted)
        #expect(cache.hits == 1)
    }

    @Test func aRememberedChainIsTrustedOnlyWhileEveryCertificateIsValid() throws {
        let cache = TrustEvaluationCache()
        let alice = try pki.peer("alice", notValidBefore: Date(timeIntervalSinceNow: -300), notValidAfter: Date(timeIntervalSinceNow: 3600))
        #expect(evaluation(cache).evaluate(alice.certificateChain) == .trusted)
        #expect(failure(evaluation(cache, at: Date(timeIntervalSinceNow: 7200)).evaluate(alice.certificateChain)) == .expired)
        #expect(failure(evaluation(cache, at: Date(timeIntervalSinceNow: -3600)).evaluate(alice.certificateChain)) == .notYetValid)
        #expect(cache.hits == 0)
        #expect(evaluation(cache, at: Date(timeIntervalSinceNow: 1800)).evaluate(alice.certificateChain) == .trusted)
        #expect(cache.hits == 1)
    }

    @Test func otherAnchorsChainsOrDepthsAreVerifiedAfresh() throws {
        let cache = TrustEvaluationCache()
        let other = try TestPKI(name: "Other")
        let alice = try pki.peer("alice")
        #expect(evaluation(cache).evaluate(alice.certificateChain) == .trusted)
        #expect(failure(evaluation(cache, anchors: [other.root]).evaluate(alice.certificateChain)) == .unknownIssuer)
        #expect(failure(evaluation(cache).evaluate([alice.certificate])) == .unknownIssuer)
        #expect(failure(evaluation(cache, depth: 0).evaluate(alice.certificateChain)) == .chainTooLong)
        // A leaf of the same name and issuer but another key is another chain.
        let twin = try pki.peer("alice")
        #expect(evaluation(cache).evaluate(twin.certificateChain) == .trusted)
        #expect(cache.hits == 0)
        // The anchors count as a set.
        #expect(evaluation(cache, anchors: [pki.root, other.root]).evaluate(alice.certificateChain) == .trusted)
        #expect(evaluation(cache, anchors: [other.root, pki.root]).evaluate(alice.certificateChain) == .trusted)
        #expect(cache.hits == 1)
    }

    @Test func failuresAreNotRemembered() throws {
        let cache = TrustEvaluationCache()
        let stranger = try TestPKI(name: "Other").peer("mallory")
        #expect(failure(evaluation(cache).evaluate(stranger.certificateChain)) == .unknownIssuer)
        #expect(cache.count == 0)
    }

    @Test func aRememberedChainExpiresAtItsNotAfterSecondAsOpenSSLSays() throws {
        let cache = TrustEvaluationCache()
        let alice = try pki.peer("alice", notValidBefore: Date(timeIntervalSinceNow: -300), notValidAfter: Date(timeIntervalSinceNow: 3600))
        #expect(evaluation(cache).evaluate(alice.certificateChain) == .trusted)
        let end = alice.certificate.notValidAfter
        #expect(evaluation(cache, at: end.addingTimeInterval(-1)).evaluate(alice.certificateChain) == .trusted)
        #expect(cache.hits == 1)
        #expect(failure(evaluation(cache, at: end).evaluate(alice.certificateChain)) == .expired)
        #expect(failure(evaluation(TrustEvaluationCache(), at: end).evaluate(alice.certificateChain)) == .expired)
        #expect(cache.hits == 1)
    }

    @Test func anAnchorsValidityBoundsItsEntries() throws {
        // A root that expires before the leaf: past the root's end, OpenSSL refuses the chain.
        let rootKey = try PrivateKey.generate()
        let root = try CertificateBuilder(
            commonName: "Short Root", notValidBefore: Date(timeIntervalSinceNow: -600), notValidAfter: Date(timeIntervalSinceNow: 1800),
            role: .certificateAuthority(pathLength: 0)
        ).issue(for: rootKey)
        let leafKey = try PrivateKey.generate()
        let leaf = try CertificateBuilder(
            commonName: "alice", notValidBefore: Date(timeIntervalSinceNow: -300), notValidAfter: Date(timeIntervalSinceNow: 7200)
        ).issue(for: leafKey, issuer: (root, rootKey))
        let cache = TrustEvaluationCache()
        #expect(evaluation(cache, anchors: [root]).evaluate([leaf]) == .trusted)
        let afterRoot = Date(timeIntervalSinceNow: 3600)
        #expect(!evaluation(TrustEvaluationCache(), anchors: [root], at: afterRoot).evaluate([leaf]).isTrusted)
        #expect(!evaluation(cache, anchors: [root], at: afterRoot).evaluate([leaf]).isTrusted)
        #expect(cache.hits == 0)
    }

    @Test func onlyChainsValidWhenCheckedAreKept() throws {
        let cache = TrustEvaluationCache()
        let chain = try pki.peer("alice", notValidBefore: Date(timeIntervalSinceNow: -300), notValidAfter: Date(timeIntervalSinceNow: 3600)).certificateChain
        let key = try #require(TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: 4, securityLevel: 2))
        let later = try #require(Date(timeIntervalSinceNow: 7200).timeT)
        cache.insertTrusted(key, anchors: [pki.root], chain: chain, at: later)
        #expect(cache.count == 0)
    }

    @Test func everyParameterIsPartOfTheKey() throws {
        let chain = try pki.peer("alice").certificateChain
        let base = TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: 4, securityLevel: 2)
        #expect(base != nil)
        #expect(base != TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: 4, securityLevel: 3))
        #expect(base != TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: 3, securityLevel: 2))
        #expect(base != TrustEvaluationCache.key(anchors: [pki.root, pki.intermediate], chain: chain, maximumDepth: 4, securityLevel: 2))
        #expect(base != TrustEvaluationCache.key(anchors: [pki.root], chain: Array(chain.reversed()), maximumDepth: 4, securityLevel: 2))
        #expect(base == TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: 4, securityLevel: 2))
    }

    @Test func theCacheKeepsAtMostItsCapacityDroppingTheOldest() throws {
        let cache = TrustEvaluationCache()
        let chain = try pki.peer("alice").certificateChain
        let keys = try (0..<(TrustEvaluationCache.capacity + 50)).map {
            try #require(TrustEvaluationCache.key(anchors: [pki.root], chain: chain, maximumDepth: $0, securityLevel: 2))
        }
        let now = try #require(Date().timeT)
        for key in keys { cache.insertTrusted(key, anchors: [pki.root], chain: chain, at: now) }
        #expect(cache.count == TrustEvaluationCache.capacity)
        #expect(!cache.isTrusted(keys[0], at: now))
        #expect(!cache.isTrusted(keys[49], at: now))
        #expect(cache.isTrusted(keys[50], at: now))
        #expect(cache.isTrusted(keys[keys.count - 1], at: now))
    }
}
