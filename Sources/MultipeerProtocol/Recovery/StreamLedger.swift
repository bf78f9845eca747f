import MultipeerWire

/// A member's `StreamLedger`, which the channel muxes of its connections use in turn (one at a
/// time, on the engine's loop).
package final class MemberStreams {
    package var ledger = StreamLedger()

    package init() {}
}

/// One member's streams across its connections (docs/PROTOCOL.md §7.10), sans-I/O: the ordinals
/// both sides give the streams each opens, how many bytes of each of the peer's streams we have
/// received (and when to say so with STREAM_ACK), and how many of ours the peer has, which bounds
/// what we keep to send again and how far a stream may run ahead of the peer's count. Lives with
/// the member; each connection's `ChannelMux` maps its channel numbers to ordinals.
package struct StreamLedger {
    /// A receiver acknowledges once this many bytes arrived since its last STREAM_ACK.
    package static let acknowledgementInterval: UInt64 = 262_144
    /// We send no more on a stream while this many of its bytes are unacknowledged (§7.10: an
    /// opener may wait at this figure, never below it).
    package static let unacknowledgedLimit: UInt64 = 1_048_576

    package enum Violation: Error, Equatable, CustomStringConvertible {
        /// A STREAM_RESUME named a stream the peer had not opened yet, nor the next one.
        case ordinalAhead(ordinal: UInt32, streams: UInt32)
        /// A STREAM_ACK counted more bytes than we sent on the stream.
        case acknowledgedUnsent(ordinal: UInt32, acknowledged: UInt64, sent: UInt64)
        /// A STREAM_ACK went back below an earlier count.
        case acknowledgementWentBack(ordinal: UInt32, acknowledged: UInt64, before: UInt64)
        /// A STREAM_ACK with CLOSED after our STREAM_CLOSE did not count the whole stream.
        case closedShort(ordinal: UInt32, acknowledged: UInt64, length: UInt64)

        package var description: String {
            switch self {
            case .ordinalAhead(let ordinal, let streams): "STREAM_RESUME of stream \(ordinal) when \(streams) were opened"
            case .acknowledgedUnsent(let ordinal, let acknowledged, let sent): "stream \(ordinal): acknowledged \(acknowledged) bytes of \(sent) sent"
            case .acknowledgementWentBack(let ordinal, let acknowledged, let before): "stream \(ordinal): acknowledged \(acknowledged) after \(before)"
            case .closedShort(let ordinal, let acknowledged, let length): "stream \(ordinal): closed at \(acknowledged) bytes of \(length)"
            }
        }
    }

    /// How one of our streams ended on our side; the peer has not acknowledged that yet.
    package enum End: Sendable, Equatable { case closed, reset }

    private struct Outgoing {
        /// Bytes sent in the session: on a resumed connection it starts again from the peer's count.
        var sent: UInt64 = 0
        var acknowledged: UInt64 = 0
        var end: End?
    }

    private struct Incoming {
        var received: UInt64 = 0
        var sinceAcknowledgement: UInt64 = 0
    }

    /// What a STREAM_RESUME of the peer's is.
    package enum PeerResumption: Equatable {
        /// Its next stream, whose STREAM_OPEN went with a lost connection: take it as new.
        case new
        /// One we still read: answer with how much of it we have.
        case kept(received: UInt64)
        /// One that ended here (we read its end, or one side reset it): STREAM_RESET 1.
        case ended
    }

    /// What a STREAM_ACK of the peer's does to one of our streams.
    package struct Acknowledgement: Equatable {
        /// Bytes of the stream we need no longer keep (from the previous count).
        package var released: UInt64
        /// On the answer to our STREAM_RESUME: bytes we had sent beyond the peer's count, which
        /// go again.
        package var rewound: UInt64
        /// The peer acknowledged the stream's end: it is over.
        package var over: Bool
        /// It answered our STREAM_RESUME: the stream goes on from its count.
        package var answered: Bool
    }

    package private(set) var streamsOpened: UInt32 = 0
    package private(set) var peerStreamsOpened: UInt32 = 0
    private var outgoing: [UInt32: Outgoing] = [:]
    private var incoming: [UInt32: Incoming] = [:]

    package init() {}

    // MARK: Our streams

    /// A new stream of ours: its ordinal; nil once 2^32 were opened in the session.
    package mutating func opened() -> UInt32? {
        guard streamsOpened < .max else { return nil }
        defer { streamsOpened += 1 }
        outgoing[streamsOpened] = Outgoing()
        return streamsOpened
    }

    /// Ours that the peer has not finished with, in order: what a resumed connection continues.
    package var keptOrdinals: [UInt32] { outgoing.keys.sorted() }

    /// Whether the peer may not have finished with our stream `ordinal`.
    package func keeps(_ ordinal: UInt32) -> Bool { outgoing[ordinal] != nil }

    package func end(of ordinal: UInt32) -> End? { outgoing[ordinal]?.end }

    /// How many more bytes may go on the stream now; 0 while the unacknowledged ones are at the limit.
    package func allowance(_ ordinal: UInt32) -> Int {
        guard let stream = outgoing[ordinal] else { return 0 }
        return Int(Self.unacknowledgedLimit - min(Self.unacknowledgedLimit, stream.sent - stream.acknowledged))
    }

    package mutating func sent(_ bytes: Int, on ordinal: UInt32) {
        outgoing[ordinal]?.sent += UInt64(bytes)
    }

    /// We closed or reset the stream; it stays until the peer acknowledges that.
    package mutating func ended(_ ordinal: UInt32, _ end: End) {
        if outgoing[ordinal]?.end == nil { outgoing[ordinal]?.end = end }
    }

    /// The peer's STREAM_ACK for one of ours; `answering`: it answers our STREAM_RESUME, and the
    /// stream goes on from its count.
    package mutating func acknowledged(
        _ ordinal: UInt32, received: UInt64, closed: Bool, answering: Bool
    ) throws(Violation) -> Acknowledgement {
        guard var stream = outgoing[ordinal] else { return Acknowledgement(released: 0, rewound: 0, over: closed, answered: answering) }
        guard received <= stream.sent else { throw .acknowledgedUnsent(ordinal: ordinal, acknowledged: received, sent: stream.sent) }
        guard received >= stream.acknowledged else {
            throw .acknowledgementWentBack(ordinal: ordinal, acknowledged: received, before: stream.acknowledged)
        }
        if closed, stream.end == .closed, received != stream.sent {
            throw .closedShort(ordinal: ordinal, acknowledged: received, length: stream.sent)
        }
        let result = Acknowledgement(
            released: received - stream.acknowledged, rewound: answering ? stream.sent - received : 0, over: closed, answered: answering)
        stream.acknowledged = received
        if answering { stream.sent = received }
        if closed { outgoing[ordinal] = nil } else { outgoing[ordinal] = stream }
        return result
    }

    /// The stream is over without an acknowledgement: the peer reset it (or answered our
    /// STREAM_RESUME so), or the member left.
    package mutating func forget(_ ordinal: UInt32) {
        outgoing[ordinal] = nil
    }

    // MARK: The peer's streams

    /// The peer opened a stream with STREAM_OPEN: its ordinal. Nil once 2^32 were opened (the
    /// peer's violation: the ordinals ran out).
    package mutating func peerOpened() -> UInt32? {
        guard peerStreamsOpened < .max else { return nil }
        defer { peerStreamsOpened += 1 }
        incoming[peerStreamsOpened] = Incoming()
        return peerStreamsOpened
    }

    /// A STREAM_RESUME of the peer's.
    package mutating func peerResumes(_ ordinal: UInt32) throws(Violation) -> PeerResumption {
        if ordinal == peerStreamsOpened {
            guard peerOpened() != nil else { throw .ordinalAhead(ordinal: ordinal, streams: peerStreamsOpened) }
            return .new
        }
        guard ordinal < peerStreamsOpened else { throw .ordinalAhead(ordinal: ordinal, streams: peerStreamsOpened) }
        guard var stream = incoming[ordinal] else { return .ended }
        stream.sinceAcknowledgement = 0
        incoming[ordinal] = stream
        return .kept(received: stream.received)
    }

    /// Bytes of the peer's stream arrived: the count to acknowledge, when a STREAM_ACK is due.
    package mutating func received(_ bytes: Int, on ordinal: UInt32) -> UInt64? {
        guard var stream = incoming[ordinal] else { return nil }
        stream.received += UInt64(bytes)
        stream.sinceAcknowledgement += UInt64(bytes)
        let due = stream.sinceAcknowledgement >= Self.acknowledgementInterval
        if due { stream.sinceAcknowledgement = 0 }
        incoming[ordinal] = stream
        return due ? stream.received : nil
    }

    /// Whether we still read the peer's stream (it can be resumed).
    package func isReading(_ ordinal: UInt32) -> Bool { incoming[ordinal] != nil }

    /// The peer's stream ended here (we read its end, or either side reset it): the count for the
    /// STREAM_ACK with CLOSED that reading its end calls for; nil when it had ended already.
    @discardableResult
    package mutating func peerStreamEnded(_ ordinal: UInt32) -> UInt64? {
        incoming.removeValue(forKey: ordinal)?.received
    }

    /// Ours and the peer's that are still open: what the member holds (each at most 64 a side,
    /// as the channels they live on).
    package var openCount: (ours: Int, peers: Int) { (outgoing.count, incoming.count) }
}
