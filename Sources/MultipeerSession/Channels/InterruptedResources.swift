import MultipeerWire
import NIOCore
import MultipeerProtocol

/// Resources cut off by a lost link of a member that recovers (docs/PROTOCOL.md §7.9), by peer,
/// until the member is resumed or leaves. Ours are offered again on the resumed link, from the
/// same file under the same transfer ID; the peer's wait for that offer and continue as the same
/// transfer from the kept partial (§7.8), so the application sees one transfer throughout.
/// Loop-only. Bounded by what was open when the link went: our 64 channels per peer (their places
/// stay taken) and the session's incoming resources (they stay counted).
final class InterruptedResources {
    struct Outgoing {
        let source: ResourceSender.Source
        let transfer: ResourceTransfer
    }

    enum Incoming {
        /// Its receiver keeps the partial (once settled) for the offer that resumes it.
        case waiting(ResourceTransfer, ResourceReceiver)
        /// The application cancelled it meanwhile: the offer that resumes it is refused.
        case cancelled
        /// Every byte and the RESOURCE_COMPLETE had arrived; the sender may not have heard the
        /// verdict, which answers its offer (`CompletedResourceEcho`).
        case completed(ResourceTransfer, SHA256Digest)
    }

    private struct IncomingEntry {
        let key: ResumeStore.Key
        var state: Incoming
        let parked: NIODeadline
    }

    private var outgoing: [Bytes16: [Outgoing]] = [:]
    /// In the order they were parked; one key may wait twice (the same file sent twice at once).
    private var incoming: [Bytes16: [IncomingEntry]] = [:]

    func park(_ send: Outgoing, for peer: Bytes16) { outgoing[peer, default: []].append(send) }

    /// `completedLimit`: at most this many `.completed` entries per peer (the oldest go): unlike
    /// the others they hold no place among the incoming resources.
    func park(_ state: Incoming, key: ResumeStore.Key, now: NIODeadline, completedLimit: Int) {
        var entries = incoming[key.peer] ?? []
        entries.append(IncomingEntry(key: key, state: state, parked: now))
        let completed = entries.indices.filter { if case .completed = entries[$0].state { true } else { false } }
        for index in completed.dropLast(completedLimit).reversed() { entries.remove(at: index) }
        incoming[key.peer] = entries
    }

    /// How many of the peer's transfers wait for an offer (they keep their places).
    func waitingCount(from peer: Bytes16) -> Int {
        incoming[peer]?.count { if case .waiting = $0.state { true } else { false } } ?? 0
    }

    /// Whether an offer for `key` would resume a waiting transfer (and take over its place).
    func resumesWaiting(_ key: ResumeStore.Key) -> Bool {
        incoming[key.peer]?.contains { entry in
            if case .waiting = entry.state { entry.key == key } else { false }
        } ?? false
    }

    /// Our interrupted sends to the peer, in the order they were parked; none are kept.
    func takeOutgoing(for peer: Bytes16) -> [Outgoing] { outgoing.removeValue(forKey: peer) ?? [] }

    /// Removes one of our sends (the application cancelled it): whether it was parked.
    func removeOutgoing(_ transfer: ResourceTransfer, for peer: Bytes16) -> Bool {
        guard let index = outgoing[peer]?.firstIndex(where: { $0.transfer === transfer }) else { return false }
        outgoing[peer]?.remove(at: index)
        if outgoing[peer]?.isEmpty == true { outgoing[peer] = nil }
        return true
    }

    /// The peer's offer for `key`: the interrupted transfer it resumes, if any (no longer parked).
    func claimIncoming(_ key: ResumeStore.Key) -> Incoming? {
        guard let index = incoming[key.peer]?.firstIndex(where: { $0.key == key }) else { return nil }
        let entry = incoming[key.peer]?.remove(at: index)
        if incoming[key.peer]?.isEmpty == true { incoming[key.peer] = nil }
        return entry?.state
    }

    /// The application cancelled a waiting transfer: the resuming offer is refused. Its key and
    /// cut-off receiver, if it waited.
    func cancelIncoming(_ transfer: ResourceTransfer, peer: Bytes16) -> (ResumeStore.Key, ResourceReceiver)? {
        guard let index = incoming[peer]?.firstIndex(where: { entry in
            if case .waiting(let waiting, _) = entry.state { waiting === transfer } else { false }
        }), let entry = incoming[peer]?[index], case .waiting(_, let receiver) = entry.state else { return nil }
        incoming[peer]?[index].state = .cancelled
        return (entry.key, receiver)
    }

    /// Takes out the peer's interrupted transfers parked at or before `parkedBy` (all without
    /// it): the peer left, or resumed and did not offer them again in time.
    func takeIncoming(for peer: Bytes16, parkedBy: NIODeadline? = nil) -> [Incoming] {
        guard let entries = incoming[peer] else { return [] }
        let isDue = { (entry: IncomingEntry) in parkedBy.map { entry.parked <= $0 } ?? true }
        let left = entries.filter { !isDue($0) }
        incoming[peer] = left.isEmpty ? nil : left
        return entries.filter(isDue).map(\.state)
    }

    var isEmpty: Bool { outgoing.isEmpty && incoming.isEmpty }
}
