import NIOCore

/// The connections a listener accepted from strangers that have not yet proved anything: at most
/// `limit` in all and `perSourceLimit` from one source. A newcomer past either limit makes room by
/// shedding the least advanced of the others (of its own source when that source is over its
/// limit) and, among equals, the longest silent. The newcomer itself is never the one shed: it has
/// had no chance to advance yet, and a flood of stalled connections must not lock real peers out.
package struct PendingConnections<ID: Hashable & Comparable> {
    let limit: Int
    let perSourceLimit: Int
    private var sources: [ID: PendingSource] = [:]
    private var countBySource: [PendingSource: Int] = [:]

    package init(limit: Int, perSourceLimit: Int) {
        self.limit = max(1, limit)
        self.perSourceLimit = max(1, min(perSourceLimit, limit))
    }

    var count: Int { sources.count }

    func count(from source: PendingSource) -> Int { countBySource[source] ?? 0 }
    func contains(_ id: ID) -> Bool { sources[id] != nil }

    /// Records a newly accepted connection; returns the one to close to make room for it, if any.
    /// The shed connection is forgotten here already.
    package mutating func accepted(_ id: ID, from source: PendingSource, progress: (ID) -> PendingProgress) -> ID? {
        var shed: ID?
        if count(from: source) >= perSourceLimit {
            shed = leastAdvanced(progress: progress) { sources[$0] == source }
        } else if count >= limit {
            shed = leastAdvanced(progress: progress) { _ in true }
        }
        if let shed { remove(shed) }
        sources[id] = source
        countBySource[source, default: 0] += 1
        return shed
    }

    /// The connection was admitted or closed: it no longer counts.
    package mutating func remove(_ id: ID) {
        guard let source = sources.removeValue(forKey: id) else { return }
        let left = countBySource[source, default: 1] - 1
        countBySource[source] = left == 0 ? nil : left
    }

    /// The connection to close when the process runs out of file descriptors (it is forgotten).
    package mutating func shedOne(progress: (ID) -> PendingProgress) -> ID? {
        guard let shed = leastAdvanced(progress: progress, where: { _ in true }) else { return nil }
        remove(shed)
        return shed
    }

    mutating func removeAll() {
        sources.removeAll()
        countBySource.removeAll()
    }

    private func leastAdvanced(progress: (ID) -> PendingProgress, where include: (ID) -> Bool) -> ID? {
        var best: (id: ID, progress: PendingProgress)?
        for id in sources.keys where include(id) {
            let candidate = progress(id)
            if let current = best, (current.progress, current.id) <= (candidate, id) { continue }
            best = (id, candidate)
        }
        return best?.id
    }
}

/// How far a pending connection got in its handshake and when it last sent anything, as the
/// shell reports them: the lower stage, then the longer silent, is shed first.
package struct PendingProgress: Comparable {
    package let stage: Int
    let lastActivity: NIODeadline

    package init(stage: Int, lastActivity: NIODeadline) {
        self.stage = stage
        self.lastActivity = lastActivity
    }

    package static func < (lhs: PendingProgress, rhs: PendingProgress) -> Bool {
        (lhs.stage, lhs.lastActivity) < (rhs.stage, rhs.lastActivity)
    }
}

/// Where a pending connection comes from, for the per-source limit: its IP address, and for an
/// IPv6 address its scope too (fe80::1 on two links is two hosts). Not an IPv6 /64: every host on
/// a LAN shares one, link-local peers all share fe80::/64, so a prefix would put them all under
/// one source's limit.
package struct PendingSource: Hashable, Sendable {
    private let bytes: [UInt8]

    package init(_ address: SocketAddress?) {
        switch address {
        case .v4(let address)?:
            bytes = withUnsafeBytes(of: address.address.sin_addr) { Array($0) }
        case .v6(let address)?:
            let all = withUnsafeBytes(of: address.address.sin6_addr) { Array($0) }
            // An IPv4-mapped address is that IPv4 address.
            let mapped = all[0..<10].allSatisfy { $0 == 0 } && all[10] == 0xFF && all[11] == 0xFF
            bytes = mapped ? Array(all[12...]) : all + withUnsafeBytes(of: address.address.sin6_scope_id) { Array($0) }
        default:
            bytes = []  // no address (a Unix socket, a test): one source
        }
    }
}
