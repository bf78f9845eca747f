import MultipeerWire
import NIOCore
import Synchronization

/// Interrupted incoming transfers kept so that the same sender can resume them (docs/PROTOCOL.md
/// §7.8): the file a transfer wrote to and how many bytes it holds, for a limited time, a limited
/// number at once. A kept file belongs to the store until a transfer takes it back or it expires.
package final class ResumeStore: Sendable {
    package struct Key: Hashable, Sendable {
        let peer: Bytes16
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
    }

    private struct Entry {
        let partial: Partial
        let expires: NIODeadline
    }

    let capacity: Int
    let lifetime: TimeAmount
    private let entries = Mutex<[(key: Key, entry: Entry)]>([])

    package init(capacity: Int, lifetime: TimeAmount) {
        self.capacity = max(0, capacity)
        self.lifetime = lifetime
    }

    var count: Int { entries.withLock { $0.count } }

    /// Keeps `partial` for `key`, evicting (and deleting) the oldest past the capacity.
    func keep(_ partial: Partial, for key: Key, now: NIODeadline = .now()) {
        var removed: [String] = []
        entries.withLock { entries in
            removed += expire(&entries, now: now)
            if let index = entries.firstIndex(where: { $0.key == key }) {
                removed.append(entries.remove(at: index).entry.partial.path)
            }
            guard capacity > 0, partial.length > 0 else {
                removed.append(partial.path)
                return
            }
            entries.append((key, Entry(partial: partial, expires: now + lifetime)))
            while entries.count > capacity { removed.append(entries.removeFirst().entry.partial.path) }
        }
        for path in removed { FileNames.remove(path) }
    }

    /// The kept partial for `key`, now the caller's; nil when none (or expired).
    package func take(_ key: Key, now: NIODeadline = .now()) -> Partial? {
        var removed: [String] = []
        let found = entries.withLock { entries -> Partial? in
            removed = expire(&entries, now: now)
            guard let index = entries.firstIndex(where: { $0.key == key }) else { return nil }
            return entries.remove(at: index).entry.partial
        }
        for path in removed { FileNames.remove(path) }
        return found
    }

    /// Deletes every kept file.
    func removeAll() {
        let paths = entries.withLock { entries in
            defer { entries.removeAll() }
            return entries.map(\.entry.partial.path)
        }
        for path in paths { FileNames.remove(path) }
    }

    private func expire(_ entries: inout [(key: Key, entry: Entry)], now: NIODeadline) -> [String] {
        let expired = entries.filter { $0.entry.expires <= now }.map(\.entry.partial.path)
        entries.removeAll { $0.entry.expires <= now }
        return expired
    }
}
