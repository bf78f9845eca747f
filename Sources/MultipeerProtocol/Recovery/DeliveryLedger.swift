import MultipeerWire
import NIOCore

/// Exactly-once delivery of one peer's reliable messages across connections, sans-I/O
/// (docs/PROTOCOL.md §7.9): each side numbers the messages it sends to the peer, keeps
/// those the peer has not acknowledged, and counts those it delivered from the peer. After a
/// lost link, each side tells the other how many it delivered; the other sends the rest again,
/// in order, before anything new. Lives with the member, not the connection.
package struct DeliveryLedger {
    /// An acknowledgement is due after this many delivered messages, or this many bytes of them,
    /// since the last one; otherwise when the acknowledgement timer fires (`RecoveryPolicy`).
    package static let acknowledgementMessages: UInt64 = 16
    package static let acknowledgementBytes = 256 * 1024
    /// What an unacknowledged message costs against the send budget beyond its bytes, so empty
    /// messages cannot grow the replay buffer without bound.
    package static let entryCharge = 64

    package enum Violation: Error, Equatable, CustomStringConvertible {
        /// The peer acknowledged more messages than were sent to it.
        case acknowledgedUnsent(acknowledged: UInt64, sent: UInt64)
        /// The peer's count went back below one it acknowledged before.
        case acknowledgementWentBack(acknowledged: UInt64, before: UInt64)

        package var description: String {
            switch self {
            case .acknowledgedUnsent(let acknowledged, let sent): "acknowledged \(acknowledged) messages of \(sent) sent"
            case .acknowledgementWentBack(let acknowledged, let before): "acknowledged \(acknowledged) after \(before)"
            }
        }
    }

    // Sending: messages `acknowledged ..< sent` are in `unacknowledged`, oldest first.
    package private(set) var sent: UInt64 = 0
    package private(set) var acknowledged: UInt64 = 0
    private var unacknowledged = CircularBuffer<ByteBuffer>()
    /// Bytes of `unacknowledged` plus `entryCharge` each: what the replay buffer holds against
    /// the send budget.
    package private(set) var unacknowledgedCharge = 0

    // Receiving.
    package private(set) var delivered: UInt64 = 0
    private var deliveredAtLastAcknowledgement: UInt64 = 0
    private var bytesSinceAcknowledgement = 0

    package init() {}

    package static func charge(of message: ByteBuffer) -> Int { message.readableBytes + entryCharge }

    /// The share of its message's charge a MESSAGE frame carries: its bytes, and the entry charge
    /// on the last one, so the frames of a message add up to `charge(of:)`.
    package static func charge(of fragment: Frame) -> Int {
        guard case .message(let bytes, let isEnd) = fragment else { return fragment.payloadLength }
        return bytes.readableBytes + (isEnd ? entryCharge : 0)
    }

    package var unacknowledgedCount: Int { unacknowledged.count }

    // MARK: Sending

    /// A message went to the peer (or was queued for its connection): kept until acknowledged.
    package mutating func sending(_ message: ByteBuffer) {
        unacknowledged.append(message)
        unacknowledgedCharge += Self.charge(of: message)
        sent += 1
    }

    /// The peer's ACK (or the count in its RESUME): returns the charge released.
    package mutating func peerDelivered(_ count: UInt64) throws(Violation) -> Int {
        guard count <= sent else { throw .acknowledgedUnsent(acknowledged: count, sent: sent) }
        guard count >= acknowledged else { throw .acknowledgementWentBack(acknowledged: count, before: acknowledged) }
        var released = 0
        while acknowledged < count {
            released += Self.charge(of: unacknowledged.removeFirst())
            acknowledged += 1
        }
        unacknowledgedCharge -= released
        return released
    }

    /// On a new connection, after the peer's RESUME: releases what it delivered and returns the
    /// messages to send again, in order, ahead of anything new. They stay kept until acknowledged.
    package mutating func resume(peerDelivered count: UInt64) throws(Violation) -> (released: Int, resend: [ByteBuffer]) {
        let released = try peerDelivered(count)
        return (released, Array(unacknowledged))
    }

    // MARK: Receiving

    /// A whole message from the peer was delivered. Returns the count to acknowledge when an ACK
    /// is due now.
    package mutating func deliveredMessage(bytes: Int) -> UInt64? {
        delivered += 1
        bytesSinceAcknowledgement += bytes
        guard delivered - deliveredAtLastAcknowledgement >= Self.acknowledgementMessages
            || bytesSinceAcknowledgement >= Self.acknowledgementBytes
        else { return nil }
        return acknowledgement()
    }

    /// The acknowledgement timer fired: the count to acknowledge, if any delivery is not yet.
    package mutating func acknowledgementDue() -> UInt64? {
        delivered > deliveredAtLastAcknowledgement ? acknowledgement() : nil
    }

    /// A RESUME says `delivered` itself, which acknowledges everything so far.
    package mutating func resuming() -> UInt64 { acknowledgement() }

    private mutating func acknowledgement() -> UInt64 {
        deliveredAtLastAcknowledgement = delivered
        bytesSinceAcknowledgement = 0
        return delivered
    }
}
