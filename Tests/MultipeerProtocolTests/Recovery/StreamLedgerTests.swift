import MultipeerProtocol
import Testing

/// Streams across a lost link (docs/PROTOCOL.md §7.10): ordinals, acknowledgements, what an
/// opener keeps, and what a STREAM_RESUME is.
@Suite("Stream ledger")
struct StreamLedgerTests {
    /// Two ledgers back to back: the opener sends 1.5 MiB, the link drops the last 300,000 bytes,
    /// and the answer to the resume rewinds the opener to exactly what the receiver has.
    @Test func aResumedStreamGoesOnFromTheReceiversCount() throws {
        var alice = StreamLedger()
        var bob = StreamLedger()
        let ordinal = alice.opened()!
        #expect(bob.peerOpened() == ordinal)
        var arrived: UInt64 = 0
        var sent = 0
        while sent < 1_572_864 {
            let frame = min(65_524, alice.allowance(ordinal), 1_572_864 - sent)
            try #require(frame > 0)
            alice.sent(frame, on: ordinal)
            sent += frame
            guard sent <= 1_272_864 else { continue }  // lost with the link
            arrived += UInt64(frame)
            if let count = bob.received(frame, on: ordinal) {
                _ = try alice.acknowledged(ordinal, received: count, closed: false, answering: false)
            }
        }
        #expect(try bob.peerResumes(ordinal) == .kept(received: arrived))
        let answer = try alice.acknowledged(ordinal, received: arrived, closed: false, answering: true)
        #expect(answer.rewound == 1_572_864 - arrived)
        #expect(alice.allowance(ordinal) == Int(StreamLedger.unacknowledgedLimit))
    }

    @Test func aReceiverAcknowledgesEveryQuarterMebibyteItReceives() {
        var bob = StreamLedger()
        let ordinal = bob.peerOpened()!
        var acknowledgements: [UInt64] = []
        for _ in 0..<20 { if let count = bob.received(65_536, on: ordinal) { acknowledgements.append(count) } }
        #expect(acknowledgements == [262_144, 524_288, 786_432, 1_048_576, 1_310_720])
        #expect(bob.peerStreamEnded(ordinal) == 1_310_720)
        #expect(bob.peerStreamEnded(ordinal) == nil)
    }

    /// An opener whose peer never acknowledges keeps at most the limit: the allowance runs out.
    @Test func anUnacknowledgedStreamStopsAtTheLimit() {
        var alice = StreamLedger()
        let ordinal = alice.opened()!
        var total = 0
        while case let allowance = alice.allowance(ordinal), allowance > 0 {
            alice.sent(min(allowance, 65_524), on: ordinal)
            total += min(allowance, 65_524)
        }
        #expect(total == Int(StreamLedger.unacknowledgedLimit))
    }

    @Test func acknowledgementsThatCountTooMuchOrGoBackAreViolations() throws {
        var alice = StreamLedger()
        let ordinal = alice.opened()!
        alice.sent(1_000, on: ordinal)
        #expect(throws: StreamLedger.Violation.acknowledgedUnsent(ordinal: 0, acknowledged: 1_001, sent: 1_000)) {
            try alice.acknowledged(ordinal, received: 1_001, closed: false, answering: false)
        }
        _ = try alice.acknowledged(ordinal, received: 600, closed: false, answering: false)
        #expect(throws: StreamLedger.Violation.acknowledgementWentBack(ordinal: 0, acknowledged: 500, before: 600)) {
            try alice.acknowledged(ordinal, received: 500, closed: false, answering: true)
        }
        alice.ended(ordinal, .closed)
        #expect(throws: StreamLedger.Violation.closedShort(ordinal: 0, acknowledged: 900, length: 1_000)) {
            try alice.acknowledged(ordinal, received: 900, closed: true, answering: false)
        }
        #expect(try alice.acknowledged(ordinal, received: 1_000, closed: true, answering: false).over)
        #expect(alice.keptOrdinals.isEmpty)
    }

    /// A stream we reset may be acknowledged closed short of what we sent: the peer stopped there.
    @Test func aResetStreamIsAcknowledgedClosedWhereverTheReceiverStopped() throws {
        var alice = StreamLedger()
        let ordinal = alice.opened()!
        alice.sent(1_000, on: ordinal)
        alice.ended(ordinal, .reset)
        #expect(try alice.acknowledged(ordinal, received: 400, closed: true, answering: false).over)
    }

    @Test func aResumeIsNewKeptOrEndedAndNeverAhead() throws {
        var bob = StreamLedger()
        let first = bob.peerOpened()!
        let second = bob.peerOpened()!
        _ = bob.received(10, on: second)
        bob.peerStreamEnded(first)
        #expect(try bob.peerResumes(first) == .ended)
        #expect(try bob.peerResumes(second) == .kept(received: 10))
        // The third stream's STREAM_OPEN went with the link: its resume opens it.
        #expect(try bob.peerResumes(2) == .new)
        #expect(bob.peerStreamsOpened == 3 && bob.isReading(2))
        #expect(throws: StreamLedger.Violation.ordinalAhead(ordinal: 4, streams: 3)) { try bob.peerResumes(4) }
    }

    @Test func keptOrdinalsAreInOrderAndKeepHowTheyEnded() {
        var alice = StreamLedger()
        for _ in 0..<5 { _ = alice.opened() }
        alice.forget(1)
        alice.ended(3, .closed)
        alice.ended(4, .reset)
        alice.ended(4, .closed)
        #expect(alice.keptOrdinals == [0, 2, 3, 4])
        #expect(alice.end(of: 3) == .closed && alice.end(of: 4) == .reset && alice.end(of: 0) == nil)
    }
}
