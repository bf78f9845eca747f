import Dispatch
import Synchronization

extension TLSContext {
    /// The context presenting `identity`, shared by every session that presents the same identity
    /// object while any of them holds it, and for `sharedContextGrace` after the last one let go:
    /// OpenSSL 3 spends about as much building two SSL_CTX as on a handshake, and sessions made
    /// one after another (an app that re-creates its session, a peer that reconnects) would
    /// otherwise each build them again. Without an identity each call makes its own context,
    /// with its own ephemeral certificate: a shared one would link the sessions to each other.
    public static func shared(identity: SecurityIdentity?) throws(SecurityError) -> TLSContext {
        guard let identity else { return try TLSContext(identity: nil) }
        let key = ObjectIdentifier(identity)
        // A live context holds its identity, so the identifier cannot have been reused by then.
        if let cached = sharedContexts.withLock({ $0[key]?.context }), cached.identity === identity {
            linger(cached, key: key)
            return cached
        }
        let made = try TLSContext(identity: identity)
        let context = sharedContexts.withLock { contexts in
            if let cached = contexts[key]?.context, cached.identity === identity { return cached }
            // Entries whose contexts are gone go first, so the table never outgrows the live ones.
            contexts = contexts.filter { $0.value.context != nil }
            contexts[key] = WeakContext(context: made)
            return made
        }
        linger(context, key: key)
        return context
    }

    /// How many contexts are shared right now (for tests).
    public static var sharedContextCount: Int { sharedContexts.withLock { $0.values.filter { $0.context != nil }.count } }

    /// How long a shared context outlives the last session that held it, unless a test changes
    /// `sharedContextGrace`.
    package static let defaultSharedContextGrace: Duration = .seconds(10)

    /// How long a shared context outlives the last session that held it. Then it goes, and
    /// with it OpenSSL's copy of the identity's key.
    package static var sharedContextGrace: Duration {
        get { grace.withLock { $0 } }
        set { grace.withLock { $0 = newValue } }
    }

    /// Holds `context` strongly until the grace after its latest hand-out has passed.
    private static func linger(_ context: TLSContext, key: ObjectIdentifier) {
        let (generation, delay) = lingering.withLock { lingering -> (UInt64, Duration) in
            let generation = (lingering[key]?.generation ?? 0) &+ 1
            lingering[key] = (context, generation)
            return (generation, grace.withLock { $0 })
        }
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) {
            // Released outside the lock: the context's deinit frees the SSL_CTX.
            let released = lingering.withLock { lingering -> TLSContext? in
                guard lingering[key]?.generation == generation else { return nil }
                return lingering.removeValue(forKey: key)?.context
            }
            _ = released
        }
    }
}

private struct WeakContext: Sendable {
    weak var context: TLSContext?
}

private let sharedContexts = Mutex<[ObjectIdentifier: WeakContext]>([:])
private let lingering = Mutex<[ObjectIdentifier: (context: TLSContext, generation: UInt64)]>([:])
private let grace = Mutex<Duration>(TLSContext.defaultSharedContextGrace)
