import MultipeerProtocol
import NIOCore
import Testing

/// Exactly once across a lost link: what each side keeps, acknowledges and sends again.
@Suite("Delivery ledger")
struct DeliveryLedgerTests {
    static func message(_ index: Int, size: Int = 10) -> ByteBuffer {
        ByteBuffer(bytes: [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: size))
    }

    /// Two ledgers back to back; the link drops what was in flight, and the resume puts every
    /// message through once, in order.
    @Test func messagesLostInFlightAreSentAgainOnceInOrder() throws {
        var alice = DeliveryLedger()
        var bob = DeliveryLedger()
        var bobGot: [ByteBuffer] = []
        for index in 0..<40 {
            let message = Self.message(index)
            alice.sending(message)
            // The link drops messages 25 to 39 (in flight when it was lost).
            guard index < 25 else { continue }
            bobGot.append(message)
            if let ack = bob.deliveredMessage(bytes: message.readableBytes) { _ = try alice.peerDelivered(ack) }
        }
        #expect(alice.acknowledged == 16)
        #expect(alice.unacknowledgedCount == 24)
        let (released, resend) = try alice.resume(peerDelivered: bob.resuming())
        #expect(released == 9 * DeliveryLedger.charge(of: Self.message(0)))
        #expect(resend == (25..<40).map { Self.message($0) })
        bobGot += resend
        #expect(bobGot == (0..<40).map { Self.message($0) })
    }

    @Test func theChargeCountsBytesAndEntriesAndComesBackOnAcknowledgement() throws {
        var ledger = DeliveryLedger()
        ledger.sending(Self.message(0, size: 0))
        ledger.sending(Self.message(1, size: 1000))
        #expect(ledger.unacknowledgedCharge == 1000 + 2 * DeliveryLedger.entryCharge)
        #expect(try ledger.peerDelivered(1) == DeliveryLedger.entryCharge)
        #expect(try ledger.peerDelivered(1) == 0)
        #expect(try ledger.peerDelivered(2) == 1000 + DeliveryLedger.entryCharge)
        #expect(ledger.unacknowledgedCharge == 0 && ledger.unacknowledgedCount == 0)
    }

    @Test func aCountOverWhatWasSentOrBelowAnEarlierOneIsAViolation() throws {
        var ledger = DeliveryLedger()
        for index in 0..<3 { ledger.sending(Self.message(index)) }
        #expect(throws: DeliveryLedger.Violation.acknowledgedUnsent(acknowledged: 4, sent: 3)) { try ledger.peerDelivered(4) }
        _ = try ledger.peerDelivered(2)
        #expect(throws: DeliveryLedger.Violation.acknowledgementWentBack(acknowledged: 1, before: 2)) { try ledger.resume(peerDelivered: 1) }
        #expect(throws: DeliveryLedger.Violation.acknowledgedUnsent(acknowledged: .max, sent: 3)) { try ledger.resume(peerDelivered: .max) }
        // A refused count changes nothing.
        #expect(ledger.acknowledged == 2 && ledger.unacknowledgedCount == 1)
    }

    @Test func acknowledgementsFollowCountBytesOrTheTimer() {
        var ledger = DeliveryLedger()
        for _ in 0..<(DeliveryLedger.acknowledgementMessages - 1) { #expect(ledger.deliveredMessage(bytes: 1) == nil) }
        #expect(ledger.deliveredMessage(bytes: 1) == DeliveryLedger.acknowledgementMessages)
        #expect(ledger.acknowledgementDue() == nil)
        #expect(ledger.deliveredMessage(bytes: DeliveryLedger.acknowledgementBytes - 1) == nil)
        #expect(ledger.deliveredMessage(bytes: 1) == DeliveryLedger.acknowledgementMessages + 2)
        #expect(ledger.deliveredMessage(bytes: 1) == nil)
        #expect(ledger.acknowledgementDue() == DeliveryLedger.acknowledgementMessages + 3)
        #expect(ledger.acknowledgementDue() == nil)
    }

    /// A flood of empty messages the peer never acknowledges is charged per entry, so the send
    /// budget that holds the charge bounds the replay buffer whatever the sizes.
    @Test func aFloodOfEmptyMessagesIsChargedPerEntry() {
        var ledger = DeliveryLedger()
        let budget = 1 << 20
        var sentCount = 0
        while ledger.unacknowledgedCharge + DeliveryLedger.charge(of: ByteBuffer()) <= budget {
            ledger.sending(ByteBuffer())
            sentCount += 1
        }
        #expect(sentCount == budget / DeliveryLedger.entryCharge)
        #expect(ledger.unacknowledgedCount == sentCount)
    }
}
