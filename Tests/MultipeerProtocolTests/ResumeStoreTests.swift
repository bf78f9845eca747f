import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// Partials kept for resuming (docs/PROTOCOL.md §7.8): their lifetime on a virtual clock, and
/// the hash state kept with them.
@Suite("Resume store")
struct ResumeStoreTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
    static let key = ResumeStore.Key(peer: .zero, fingerprint: nil, transferID: .zero, size: 1 << 20)

    static func partial(_ length: UInt64) -> ResumeStore.Partial {
        ResumeStore.Partial(path: "/nonexistent/\(length).part", length: length, hashState: SHA256Hasher())
    }

    /// Before, every keep started a fresh lifetime, so a peer that offered a kept transfer and
    /// dropped the connection before sending a byte, once in every lifetime, kept it for ever.
    @Test func aResumeThatAddsNoBytesKeepsTheFirstDeadline() {
        var store = ResumeStore(capacity: 4, lifetime: .minutes(10))
        store.keep(Self.partial(100), for: Self.key, now: Self.start)
        for minute in 1...9 {
            let now = Self.start + .minutes(Int64(minute))
            guard let taken = store.take(Self.key, now: now).partial else {
                Issue.record("gone after \(minute) minutes of a 10-minute lifetime")
                return
            }
            #expect(store.keep(Self.partial(100), for: Self.key, resumed: taken, now: now).isEmpty)
        }
        let (late, expired) = store.take(Self.key, now: Self.start + .minutes(10))
        #expect(late == nil, "renewed by resumes that added nothing")
        #expect(expired.map(\.length) == [100])
        #expect(store.count == 0)
    }

    /// A resume that stored more bytes earns a fresh lifetime from then.
    @Test func aResumeThatAddsBytesRenewsTheLifetime() throws {
        var store = ResumeStore(capacity: 4, lifetime: .minutes(10))
        store.keep(Self.partial(100), for: Self.key, now: Self.start)
        let now = Self.start + .minutes(9)
        let taken = try #require(store.take(Self.key, now: now).partial)
        store.keep(Self.partial(200), for: Self.key, resumed: taken, now: now)
        #expect(store.take(Self.key, now: now + .minutes(9)).partial?.length == 200)
    }

    /// A session going away closes its store: a transfer its own disconnect cut off reaches
    /// `keep` after that, and is handed back for deletion instead of outliving the session.
    @Test func aClosedStoreKeepsNothing() {
        var store = ResumeStore(capacity: 4, lifetime: .minutes(10))
        store.keep(Self.partial(100), for: Self.key, now: Self.start)
        #expect(store.close().map(\.length) == [100])
        #expect(store.keep(Self.partial(200), for: Self.key, now: Self.start).map(\.length) == [200])
        #expect(store.count == 0 && store.nextExpiry == nil)
    }

    /// A resume cut off after its partial's deadline passed does not put it back.
    @Test func aPartialWhoseDeadlinePassedDuringAResumeIsNotKept() throws {
        var store = ResumeStore(capacity: 4, lifetime: .minutes(10))
        store.keep(Self.partial(100), for: Self.key, now: Self.start)
        let taken = try #require(store.take(Self.key, now: Self.start + .minutes(9)).partial)
        let dropped = store.keep(Self.partial(100), for: Self.key, resumed: taken, now: Self.start + .minutes(11))
        #expect(dropped.map(\.length) == [100])
        #expect(store.count == 0)
    }

    /// The store says when the next partial goes and hands back exactly those due, on the clock
    /// it is given; the engine's timer acts on that.
    @Test func expiryIsDecidedOnTheGivenClock() {
        var store = ResumeStore(capacity: 4, lifetime: .minutes(10))
        #expect(store.nextExpiry == nil)
        store.keep(Self.partial(100), for: Self.key, now: Self.start)
        let other = ResumeStore.Key(peer: .zero, fingerprint: nil, transferID: .random(), size: 1 << 20)
        store.keep(Self.partial(200), for: other, now: Self.start + .minutes(3))
        #expect(store.nextExpiry == Self.start + .minutes(10))
        #expect(store.expire(now: Self.start + .minutes(10) - .nanoseconds(1)).isEmpty)
        #expect(store.expire(now: Self.start + .minutes(10)).map(\.length) == [100])
        #expect(store.nextExpiry == Self.start + .minutes(13))
        #expect(store.expire(now: Self.start + .minutes(13)).map(\.length) == [200])
        #expect(store.nextExpiry == nil)
    }

    /// A copied hasher and its original, fed the same bytes, give the same digest.
    @Test func aCopiedHasherContinuesWhereTheOriginalWas() throws {
        let bytes = seededContent(100_000, seed: 3)
        let original = SHA256Hasher()
        original.update(Array(bytes.prefix(40_000)))
        let copy = try #require(original.copy())
        original.update(Array(bytes.dropFirst(40_000)))
        copy.update(Array(bytes.dropFirst(40_000)))
        #expect(original.finalize() == SHA256Hasher.digest(bytes))
        #expect(copy.finalize() == SHA256Hasher.digest(bytes))
    }
}
