import Synchronization

extension TLSContext {
    /// The context presenting `identity`, shared by every session that presents the same identity
    /// object while any of them holds it: OpenSSL 3 spends about as much building two SSL_CTX as
    /// on a handshake. Without an identity each call makes its own context, with its own ephemeral
    /// certificate: a shared one would link the sessions to each other.
    public static func shared(identity: SecurityIdentity?) throws(SecurityError) -> TLSContext {
        guard let identity else { return try TLSContext(identity: nil) }
        let key = ObjectIdentifier(identity)
        // A live context holds its identity, so the identifier cannot have been reused by then.
        if let cached = sharedContexts.withLock({ $0[key]?.context }), cached.identity === identity { return cached }
        let made = try TLSContext(identity: identity)
        return sharedContexts.withLock { contexts in
            if let cached = contexts[key]?.context, cached.identity === identity { return cached }
            // Entries whose contexts are gone go first, so the table never outgrows the live ones.
            contexts = contexts.filter { $0.value.context != nil }
            contexts[key] = WeakContext(context: made)
            return made
        }
    }

    /// How many contexts are shared right now (for tests).
    public static var sharedContextCount: Int { sharedContexts.withLock { $0.values.filter { $0.context != nil }.count } }
}

private struct WeakContext: Sendable {
    weak var context: TLSContext?
}

private let sharedContexts = Mutex<[ObjectIdentifier: WeakContext]>([:])
