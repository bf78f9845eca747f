import MultipeerSession
import MultipeerWire
import NIOCore
import Synchronization

/// Where this process's browsers see each peer's host, passed to its live sessions. A session
/// recovering a lost link to that peer redials it there (docs/PROTOCOL.md §7.9): after both
/// sides moved, nothing else can say where the other is. Apple's API links a browser and a
/// session only through an invitation; this is the link for recovery, inside the process.
enum DiscoveryNews {
    /// Weak: a session that is gone hears nothing. `@unchecked`: only read and written under the lock.
    private struct Subscriber: @unchecked Sendable {
        weak var engine: SessionEngine?
    }

    private static let subscribers = Mutex<[ObjectIdentifier: Subscriber]>([:])

    static func subscribe(_ engine: SessionEngine) {
        subscribers.withLock { $0[ObjectIdentifier(engine)] = Subscriber(engine: engine) }
    }

    static func unsubscribe(_ engine: SessionEngine) {
        _ = subscribers.withLock { $0.removeValue(forKey: ObjectIdentifier(engine)) }
    }

    /// A browser found `peer`, or sees it at other addresses now.
    static func peerSeen(_ peer: Bytes16, at addresses: [SocketAddress]) {
        guard !addresses.isEmpty else { return }
        let engines = subscribers.withLock { $0.values.compactMap(\.engine) }
        for engine in engines { engine.peerDiscovered(peer, at: addresses) }
    }
}
