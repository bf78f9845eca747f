import MultipeerWire
import NIOCore

/// Single-use connection-data tokens, each for one peer and until a deadline (docs/PROTOCOL.md §7.3).
/// Bounded: past `capacity` live tokens the one expiring first is dropped, so an application that
/// asks for connection data in a loop cannot grow the table.
package struct TokenTable {
    static let capacity = 1024

    private struct Entry {
        let forPeer: Bytes16
        let expires: NIODeadline
    }

    private var entries: [Bytes16: Entry] = [:]

    var count: Int { entries.count }

    mutating func issue(_ token: Bytes16, forPeer peer: Bytes16, until expires: NIODeadline, now: NIODeadline) {
        expire(now: now)
        if entries.count >= Self.capacity, let first = entries.min(by: { $0.value.expires < $1.value.expires }) {
            entries[first.key] = nil
        }
        entries[token] = Entry(forPeer: peer, expires: expires)
    }

    /// Whether `token` is live and was issued for `peer`; a token that matches is used up.
    mutating func redeem(_ token: Bytes16, by peer: Bytes16, now: NIODeadline) -> Bool {
        expire(now: now)
        guard let entry = entries[token], entry.forPeer == peer else { return false }
        entries[token] = nil
        return true
    }

    mutating func expire(now: NIODeadline) {
        entries = entries.filter { $0.value.expires > now }
    }

    mutating func removeAll() { entries.removeAll() }
}
