import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// The table of introductions (docs/PROTOCOL.md §7.4) on its own, with time passed in.
@Suite("Introduction ledger")
struct IntroductionLedgerTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
    let mallory = Bytes16(high: 0xBAD, low: 1)
    let alice = Bytes16(high: 0xA11CE, low: 1)

    @Test func aFloodOfIntroductionsKeepsTheQuotaAndNothingElse() {
        var ledger = IntroductionLedger()
        var recorded = 0
        for index in 0..<10_000 {
            if ledger.record(Bytes16(high: 1, low: UInt64(index)), by: mallory, until: start + .seconds(60), now: start) { recorded += 1 }
        }
        #expect(recorded == IntroductionLedger.maxPerIntroducer)
        #expect(ledger.count == IntroductionLedger.maxPerIntroducer)
        // Another introducer has a quota of its own; renewing a live entry is always allowed.
        let outcome1 = ledger.record(Bytes16(high: 2, low: 0), by: alice, until: start + .seconds(60), now: start)
        #expect(outcome1)
        let outcome2 = ledger.record(Bytes16(high: 1, low: 0), by: mallory, until: start + .seconds(90), now: start)
        #expect(outcome2)
    }

    @Test func entriesExpireAreConsumedOnceAndLeaveWithTheirIntroducer() {
        var ledger = IntroductionLedger()
        let peer = Bytes16(high: 3, low: 3)
        let outcome3 = ledger.record(peer, by: alice, until: start + .seconds(60), now: start)
        #expect(outcome3)
        let outcome4 = ledger.consume(peer, by: mallory, now: start)
        #expect(!outcome4)  // someone else's vouching does not count
        let outcome5 = ledger.consume(peer, by: alice, now: start + .seconds(59))
        #expect(outcome5)
        let outcome6 = ledger.consume(peer, by: alice, now: start + .seconds(59))
        #expect(!outcome6)  // single use
        let outcome7 = ledger.record(peer, by: alice, until: start + .seconds(60), now: start)
        #expect(outcome7)
        let outcome8 = ledger.consume(peer, by: alice, now: start + .seconds(60))
        #expect(!outcome8)  // expired
        #expect(ledger.count == 0)
        for index in 0..<6 { _ = ledger.record(Bytes16(high: 4, low: UInt64(index)), by: mallory, until: start + .seconds(60), now: start) }
        ledger.forget(introducer: mallory)
        #expect(ledger.count == 0)
        let outcome9 = ledger.record(Bytes16(high: 5, low: 0), by: mallory, until: start + .seconds(60), now: start)
        #expect(outcome9)
    }
}
