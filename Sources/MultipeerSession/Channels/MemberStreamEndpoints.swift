import NIOCore

/// A member's stream endpoints by their session ordinals (docs/PROTOCOL.md §7.10), on the
/// engine's loop: ours and the peer's, while the connection that carries them acknowledges
/// streams. A lost link leaves them here, unbound, for the resumed one to carry on; the member
/// leaving fails them. At most 64 a side, as the channels they live on.
final class MemberStreamEndpoints {
    var writers: [UInt32: ByteStreamWriter] = [:]
    /// Each reader, and since when it waits unbound for the peer's STREAM_RESUME (nil: bound).
    var readers: [UInt32: (reader: ByteStreamReader, unboundSince: NIODeadline?)] = [:]

    var isEmpty: Bool { writers.isEmpty && readers.isEmpty }
}
