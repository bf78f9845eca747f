import MultipeerWire
import NIOCore
import Testing
@testable import MultipeerProtocol

/// The channel rules of streams that outlive their connection (docs/PROTOCOL.md §7.6, §7.10):
/// STREAM_RESUME opens a channel that waits for its answer, STREAM_ACK comes from the receiver,
/// and with link recovery our ended streams stay until their end is acknowledged.
@Suite("Channel table: stream resumption and acknowledgements (docs/PROTOCOL.md §7.10)")
struct StreamAcknowledgementTableTests {
    static func table(recovering: Bool = true) -> ChannelTable {
        var table = ChannelTable(weAreDialer: false)
        table.acknowledgesStreams = recovering
        return table
    }

    static func reason(_ disposition: ChannelTable.Disposition) -> GoodbyeReason? {
        if case .violation(let error) = disposition { return error.goodbyeReason }
        return nil
    }

    static let byte = ByteBuffer(bytes: [1])

    @Test func withoutLinkRecoveryTheNewFramesAreViolations() {
        var table = Self.table(recovering: false)
        #expect(Self.reason(table.received(.streamResume(channel: 1, ordinal: 0, name: "s"))) == .protocolError)
        var other = Self.table(recovering: false)
        #expect(Self.reason(other.received(.streamAcknowledge(channel: 2, received: 0, closed: false))) == .protocolError)
        #expect(throws: SendRefusal.self) { try other.sending(.streamResume(channel: 2, ordinal: 0, name: "s")) }
        #expect(throws: SendRefusal.self) { try other.sending(.streamAcknowledge(channel: 1, received: 0, closed: false)) }
    }

    /// A resource offered again on a resumed link says so; without link recovery there is none.
    @Test func aResumedResourceOfferNeedsLinkRecovery() throws {
        let offer = try ResourceOffer(size: 10, transferID: .zero, name: "r", resumed: true, sendID: 1)
        var plain = Self.table(recovering: false)
        #expect(Self.reason(plain.received(.resourceOffer(channel: 1, offer))) == .protocolError)
        #expect(throws: SendRefusal.self) { try plain.sending(.resourceOffer(channel: 2, offer)) }
        var recovering = Self.table()
        #expect(recovering.received(.resourceOffer(channel: 1, offer)) == .opened(1))
        try recovering.sending(.resourceOffer(channel: 2, offer))
    }

    /// With link recovery every offer names its send (docs/PROTOCOL.md §6.4.14), and only then:
    /// a receiver could not tell its sends of the same content apart (§7.9).
    @Test func anOfferNamesItsSendExactlyWithLinkRecovery() throws {
        let named = try ResourceOffer(size: 10, transferID: .zero, name: "r", resumed: false, sendID: 7)
        let unnamed = try ResourceOffer(size: 10, transferID: .zero, name: "r")
        var recovering = Self.table()
        #expect(Self.reason(recovering.received(.resourceOffer(channel: 1, unnamed))) == .protocolError)
        #expect(throws: SendRefusal.self) { try recovering.sending(.resourceOffer(channel: 2, unnamed)) }
        var plain = Self.table(recovering: false)
        #expect(Self.reason(plain.received(.resourceOffer(channel: 1, named))) == .protocolError)
        #expect(throws: SendRefusal.self) { try plain.sending(.resourceOffer(channel: 2, named)) }
        var both = Self.table()
        #expect(both.received(.resourceOffer(channel: 1, named)) == .opened(1))
        var neither = Self.table(recovering: false)
        #expect(neither.received(.resourceOffer(channel: 1, unnamed)) == .opened(1))
    }

    @Test func aResumedChannelTakesNoDataBeforeItsAnswer() throws {
        var table = Self.table()
        #expect(table.received(.streamResume(channel: 1, ordinal: 3, name: "s")) == .opened(1))
        #expect(Self.reason(table.received(.streamData(channel: 1, Self.byte))) == .protocolError)

        var closing = Self.table()
        _ = closing.received(.streamResume(channel: 1, ordinal: 3, name: "s"))
        #expect(Self.reason(closing.received(.streamClose(channel: 1))) == .protocolError)

        var answered = Self.table()
        _ = answered.received(.streamResume(channel: 1, ordinal: 3, name: "s"))
        try answered.sending(.streamAcknowledge(channel: 1, received: 10, closed: false))
        #expect(answered.received(.streamData(channel: 1, Self.byte)) == .forOpenChannel(1))
        #expect(answered.received(.streamClose(channel: 1)) == .forOpenChannel(1))
        // Its end is acknowledged after the channel ended here.
        try answered.sending(.streamAcknowledge(channel: 1, received: 11, closed: true))
    }

    @Test func weSendNothingOnOurResumedChannelBeforeItsAnswerButAReset() throws {
        var table = Self.table()
        try table.sending(.streamResume(channel: 2, ordinal: 0, name: "s"))
        #expect(throws: SendRefusal.self) { try table.sending(.streamData(channel: 2, Self.byte)) }
        #expect(throws: SendRefusal.self) { try table.sending(.streamClose(channel: 2)) }
        #expect(table.received(.streamAcknowledge(channel: 2, received: 0, closed: false)) == .forOpenChannel(2))
        try table.sending(.streamData(channel: 2, Self.byte))

        var early = Self.table()
        try early.sending(.streamResume(channel: 2, ordinal: 0, name: "s"))
        #expect(Self.reason(early.received(.windowUpdate(channel: 2, increment: 100))) == .protocolError)

        var resetting = Self.table()
        try resetting.sending(.streamResume(channel: 2, ordinal: 0, name: "s"))
        try resetting.sending(.streamReset(channel: 2, code: .cancelled))
        #expect(resetting.received(.streamAcknowledge(channel: 2, received: 0, closed: false)) == .forOpenChannel(2))
        #expect(resetting.received(.streamAcknowledge(channel: 2, received: 0, closed: true)) == .forOpenChannel(2))
        #expect(!resetting.isLocalChannelOpen(2))
    }

    /// With link recovery a closed stream of ours stays open (and counts among our 64) until the
    /// receiver acknowledges its end; CLOSED before we ended it is a violation.
    @Test func ourClosedStreamStaysUntilItsEndIsAcknowledged() throws {
        var table = Self.table()
        try table.sending(.streamOpen(channel: 2, name: "s"))
        #expect(Self.reason(table.received(.streamAcknowledge(channel: 2, received: 0, closed: true))) == .protocolError)

        var closing = Self.table()
        try closing.sending(.streamOpen(channel: 2, name: "s"))
        try closing.sending(.streamData(channel: 2, Self.byte))
        try closing.sending(.streamClose(channel: 2))
        #expect(closing.isLocalChannelOpen(2) && closing.localOpenCount == 1)
        #expect(throws: SendRefusal.self) { try closing.sending(.streamData(channel: 2, Self.byte)) }
        #expect(closing.received(.streamAcknowledge(channel: 2, received: 1, closed: false)) == .forOpenChannel(2))
        #expect(closing.received(.streamAcknowledge(channel: 2, received: 1, closed: true)) == .forOpenChannel(2))
        #expect(!closing.isLocalChannelOpen(2))
        // A late one for the ended channel is dropped.
        #expect(closing.received(.streamAcknowledge(channel: 2, received: 1, closed: true)) == .handled)

        var plain = Self.table(recovering: false)
        try plain.sending(.streamOpen(channel: 2, name: "s"))
        try plain.sending(.streamClose(channel: 2))
        #expect(!plain.isLocalChannelOpen(2))
    }

    @Test func onlyTheReceiverAcknowledgesAndOnlyStreams() throws {
        var table = Self.table()
        _ = table.received(.streamOpen(channel: 1, name: "s"))
        #expect(Self.reason(table.received(.streamAcknowledge(channel: 1, received: 0, closed: false))) == .protocolError)

        var resource = Self.table()
        try resource.sending(.resourceOffer(channel: 2, try ResourceOffer(size: 10, transferID: .zero, name: "r", resumed: false, sendID: 1)))
        #expect(Self.reason(resource.received(.streamAcknowledge(channel: 2, received: 0, closed: false))) == .protocolError)
    }
}
