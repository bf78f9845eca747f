import MultipeerWire
import NIOCore

/// Which connected member vouched for which peer, and until when (docs/PROTOCOL.md §7.4).
/// Bounded by construction: only connected members introduce, and each may have at most
/// `maxPerIntroducer` live introductions, so a hostile member cannot grow the table or make the
/// session dial more than that many addresses per introduction lifetime.
package struct IntroductionLedger {
    static let maxPerIntroducer = WireLimits.maxMeshIntroductionEntries

    /// introduced peer -> introducer -> until when.
    private var entries: [Bytes16: [Bytes16: NIODeadline]] = [:]
    private var countByIntroducer: [Bytes16: Int] = [:]

    var count: Int { countByIntroducer.values.reduce(0, +) }

    /// Records that `introducer` vouched for `peer`; false when the introducer has used its quota
    /// (nothing is recorded then). Renewing a live entry always succeeds.
    mutating func record(_ peer: Bytes16, by introducer: Bytes16, until deadline: NIODeadline, now: NIODeadline) -> Bool {
        expire(now: now)
        if entries[peer]?[introducer] != nil {
            entries[peer]![introducer] = deadline
            return true
        }
        guard countByIntroducer[introducer, default: 0] < Self.maxPerIntroducer else { return false }
        entries[peer, default: [:]][introducer] = deadline
        countByIntroducer[introducer, default: 0] += 1
        return true
    }

    /// Whether `introducer` vouched for `peer` and the introduction is still live; consumes every
    /// introduction of `peer` when it is.
    mutating func consume(_ peer: Bytes16, by introducer: Bytes16, now: NIODeadline) -> Bool {
        expire(now: now)
        guard entries[peer]?[introducer] != nil else { return false }
        forget(peer: peer)
        return true
    }

    /// Drops every introduction `introducer` made (it left the session).
    mutating func forget(introducer: Bytes16) {
        for peer in Array(entries.keys) where entries[peer]?[introducer] != nil {
            remove(peer, introducer)
        }
    }

    mutating func forget(peer: Bytes16) {
        for introducer in Array(entries[peer]?.keys ?? [:].keys) { remove(peer, introducer) }
    }

    mutating func expire(now: NIODeadline) {
        for (peer, byIntroducer) in entries {
            for (introducer, deadline) in byIntroducer where deadline <= now { remove(peer, introducer) }
        }
    }

    private mutating func remove(_ peer: Bytes16, _ introducer: Bytes16) {
        guard entries[peer]?.removeValue(forKey: introducer) != nil else { return }
        if entries[peer]?.isEmpty == true { entries[peer] = nil }
        countByIntroducer[introducer, default: 1] -= 1
        if countByIntroducer[introducer] == 0 { countByIntroducer[introducer] = nil }
    }
}
