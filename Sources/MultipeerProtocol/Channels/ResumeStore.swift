import MultipeerCrypto
import MultipeerWire
import NIOCore

/// Interrupted incoming transfers kept so that the same sender can resume them (docs/PROTOCOL.md
/// §7.8): the file a transfer wrote to, how many bytes it holds and the SHA-256 state over exactly
/// those bytes, for a limited time, a limited number at once. Sans-I/O: it decides what is kept
/// and what goes when, on the clock it is given; the caller deletes the files of the partials it
/// hands back and wakes itself at `nextExpiry`.
package struct ResumeStore: Sendable {
    package struct Key: Hashable, Sendable {
        package let peer: Bytes16
        /// The sender's certificate fingerprint; nil without an identity.
        let fingerprint: [UInt8]?
        let transferID: Bytes16
        let size: UInt64

        package init(peer: Bytes16, fingerprint: [UInt8]?, transferID: Bytes16, size: UInt64) {
            self.peer = peer
            self.fingerprint = fingerprint
            self.transferID = transferID
            self.size = size
        }
    }

    package struct Partial: Sendable {
        package let path: String
        package let length: UInt64
        /// SHA-256 fed the first `length` bytes of the file as they were written, so a resume
        /// continues from it and never reads the prefix back. Owned by whoever holds the partial;
        /// freeing it zeroes it (SHA256Hasher).
        package let hashState: SHA256Hasher
        /// When it goes; set by the store.
        package fileprivate(set) var expires: NIODeadline = .distantFuture

        package init(path: String, length: UInt64, hashState: SHA256Hasher) {
            self.path = path
            self.length = length
            self.hashState = hashState
        }
    }

    let capacity: Int
    let lifetime: TimeAmount
    /// Oldest first.
    private var entries: [(key: Key, partial: Partial)] = []
    /// Set by `close()`: the session is going away and keeps nothing more.
    private var closed = false

    package init(capacity: Int, lifetime: TimeAmount) {
        self.capacity = max(0, capacity)
        self.lifetime = lifetime
    }

    package var count: Int { entries.count }

    /// The earliest deadline of a kept partial; nil when none is kept.
    package var nextExpiry: NIODeadline? { entries.map(\.partial.expires).min() }

    /// Keeps `partial` for `key`. `resumed` is the partial the transfer took back, if any: its
    /// deadline stands unless the transfer added bytes, so offering a kept transfer and dropping
    /// the connection, over and over, cannot keep it for ever. Returns the partials dropped (this
    /// one when it is not kept, expired, replaced or evicted past the capacity): their files are
    /// the caller's to delete. A closed store keeps nothing.
    @discardableResult
    package mutating func keep(_ partial: Partial, for key: Key, resumed: Partial? = nil, now: NIODeadline) -> [Partial] {
        var partial = partial
        if let resumed, partial.length <= resumed.length {
            partial.expires = resumed.expires
        } else {
            partial.expires = now + lifetime
        }
        var dropped = Self.expire(&entries, now: now)
        if let index = entries.firstIndex(where: { $0.key == key }) { dropped.append(entries.remove(at: index).partial) }
        guard !closed, capacity > 0, partial.length > 0, partial.expires > now else { return dropped + [partial] }
        entries.append((key, partial))
        while entries.count > capacity { dropped.append(entries.removeFirst().partial) }
        return dropped
    }

    /// The kept partial for `key`, now the caller's (nil when none or expired), and the partials
    /// that expired by `now`.
    package mutating func take(_ key: Key, now: NIODeadline) -> (partial: Partial?, expired: [Partial]) {
        let expired = Self.expire(&entries, now: now)
        guard let index = entries.firstIndex(where: { $0.key == key }) else { return (nil, expired) }
        return (entries.remove(at: index).partial, expired)
    }

    /// Drops the partials whose deadline is `now` or earlier and returns them.
    package mutating func expire(now: NIODeadline) -> [Partial] {
        Self.expire(&entries, now: now)
    }

    /// Drops every kept partial and returns them, and keeps none from now on: a transfer cut
    /// off by the session's own end is handed to `keep` later (a disconnect runs on the loop, a
    /// write may still be landing), and must go too rather than outlive the session.
    package mutating func close() -> [Partial] {
        closed = true
        defer { entries.removeAll() }
        return entries.map(\.partial)
    }

    private static func expire(_ entries: inout [(key: Key, partial: Partial)], now: NIODeadline) -> [Partial] {
        let expired = entries.filter { $0.partial.expires <= now }.map(\.partial)
        entries.removeAll { $0.partial.expires <= now }
        return expired
    }
}
