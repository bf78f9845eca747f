import NIOCore
import Testing

@testable import MultipeerProtocol

/// The stranger listeners' accept rate (`AcceptPacing`), on a virtual clock.
@Suite("Accept pacing")
struct AcceptPacingTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test func aBurstGoesThroughThenTheListenerPausesUntilATokenIsBack() {
        var pacing = AcceptPacing(perSecond: 1_000, burst: 10)
        let pauses = (0..<9).map { _ in pacing.accepted(now: Self.start) }
        #expect(pauses.allSatisfy { $0 == nil })
        let pause = pacing.accepted(now: Self.start)
        #expect(pause == Self.start + .milliseconds(1))
    }

    /// However fast connections arrive, no more than the rate (plus the burst) is accepted.
    @Test(arguments: [1, 7, 50])
    func theSustainedRateIsTheConfiguredOne(arrivalsPerMillisecond: Int) {
        var pacing = AcceptPacing(perSecond: 3_000, burst: 256)
        var now = Self.start
        var accepted = 0
        let end = Self.start + .seconds(10)
        while now < end {
            accepted += 1
            if let resume = pacing.accepted(now: now) {
                now = resume
            } else {
                now = now + .nanoseconds(1_000_000 / Int64(arrivalsPerMillisecond))
            }
        }
        let ceiling = 3_000 * 10 + 256
        #expect(accepted <= ceiling)
        // Arrivals faster than the rate are paced to it; slower ones all get in.
        let arrivals = arrivalsPerMillisecond * 10_000
        #expect(accepted >= min(arrivals, 3_000 * 10) - 1)
    }

    @Test func anIdleListenerRefillsOnlyToTheBurst() {
        var pacing = AcceptPacing(perSecond: 100, burst: 5)
        let later = Self.start + .seconds(60)
        _ = pacing.accepted(now: Self.start)
        let pauses = (0..<5).map { _ in pacing.accepted(now: later) }
        #expect(pauses.prefix(4).allSatisfy { $0 == nil } && pauses[4] != nil)
    }
}
