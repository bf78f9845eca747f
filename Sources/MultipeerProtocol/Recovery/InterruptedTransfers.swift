import MultipeerWire
import NIOCore

/// Transfers cut off by a lost link of a member that recovers (docs/PROTOCOL.md §7.9), by peer,
/// until the member is resumed or leaves, sans-I/O. Ours are offered again on the resumed link,
/// from the same source under the same transfer ID; the peer's wait for that offer and continue
/// as the same transfer from the kept partial (§7.8), so the application sees one transfer
/// throughout. Generic over what the shell keeps: `Source` (what a sender reads), `Transfer`
/// (the application's handle, matched by identity) and `CutOff` (the receiver that keeps the
/// partial). Bounded by what was open when the link went: our 64 channels per peer (their places
/// stay taken) and the peer's incoming resources (they stay counted, `waitingCount`); verdicts
/// remembered for offers (`.completed`) are capped per peer apart.
package final class InterruptedTransfers<Source, Transfer: AnyObject, CutOff> {
    package struct Outgoing {
        package let source: Source
        package let transfer: Transfer

        package init(source: Source, transfer: Transfer) {
            self.source = source
            self.transfer = transfer
        }
    }

    package enum Incoming {
        /// Its receiver keeps the partial (once settled) for the offer that resumes it.
        case waiting(Transfer, CutOff)
        /// The application cancelled it meanwhile: the offer that resumes it is refused.
        case cancelled
        /// Every byte had arrived and the whole file was being checked; the sender may not have
        /// heard the verdict, which answers its offer.
        case completed(Transfer, SHA256Digest)

        var isWaiting: Bool { if case .waiting = self { true } else { false } }
        var isCompleted: Bool { if case .completed = self { true } else { false } }
    }

    /// Which of the peer's sends an incoming transfer is: its content and its send ID (§7.9).
    /// Offers are matched on both, so another send of the same content never takes a transfer
    /// or a verdict that is not its own.
    package struct Send: Hashable, Sendable {
        package let key: ResumeStore.Key
        /// Nil only without link recovery, where nothing is kept.
        package let id: UInt64?

        package init(_ key: ResumeStore.Key, id: UInt64?) {
            self.key = key
            self.id = id
        }
    }

    private struct IncomingEntry {
        let send: Send
        var state: Incoming
        let parked: NIODeadline
    }

    private var outgoing: [Bytes16: [Outgoing]] = [:]
    /// In the order they were parked; one content may wait twice (the same file sent twice at
    /// once), under two sends.
    private var incoming: [Bytes16: [IncomingEntry]] = [:]
    /// At most this many `.completed` entries per peer (the oldest go): unlike the others they
    /// hold no place among the incoming resources.
    package let completedLimit: Int

    package init(completedLimit: Int) {
        self.completedLimit = completedLimit
    }

    // MARK: Ours

    /// How many of our sends a lost link cut off, in all; the others parked were made while the
    /// member was recovering. Diagnostics (and tests) tell the two paths apart by it.
    package private(set) var sendsCutOff = 0

    /// `cutOff`: the send was open on the link that went (else it was made since).
    package func park(_ send: Outgoing, for peer: Bytes16, cutOff: Bool) {
        if cutOff { sendsCutOff += 1 }
        outgoing[peer, default: []].append(send)
    }

    /// Our interrupted sends to the peer, in the order they were parked; none are kept.
    package func takeOutgoing(for peer: Bytes16) -> [Outgoing] { outgoing.removeValue(forKey: peer) ?? [] }

    /// Removes one of our sends (the application cancelled it): whether it was parked.
    package func removeOutgoing(_ transfer: Transfer, for peer: Bytes16) -> Bool {
        guard let index = outgoing[peer]?.firstIndex(where: { $0.transfer === transfer }) else { return false }
        outgoing[peer]?.remove(at: index)
        if outgoing[peer]?.isEmpty == true { outgoing[peer] = nil }
        return true
    }

    // MARK: The peer's

    package func park(_ state: Incoming, send: Send, now: NIODeadline) {
        let peer = send.key.peer
        var entries = incoming[peer] ?? []
        entries.append(IncomingEntry(send: send, state: state, parked: now))
        let completed = entries.indices.filter { entries[$0].state.isCompleted }
        for index in completed.dropLast(completedLimit).reversed() { entries.remove(at: index) }
        incoming[peer] = entries
    }

    /// How many of the peer's transfers wait for an offer (they keep their places).
    package func waitingCount(from peer: Bytes16) -> Int { incoming[peer]?.count { $0.state.isWaiting } ?? 0 }

    /// Entries kept for the peer, of every kind.
    package func incomingCount(from peer: Bytes16) -> Int { incoming[peer]?.count ?? 0 }

    /// Whether an offer of `send` would resume a waiting transfer (and take over its place).
    package func resumesWaiting(_ send: Send) -> Bool {
        incoming[send.key.peer]?.contains { $0.send == send && $0.state.isWaiting } ?? false
    }

    /// Whether an offer of `send` (RESUMED or not) is answered from memory (a verdict or a
    /// cancel), not by a transfer that waits.
    package func answersFromMemory(_ send: Send, resumed: Bool) -> Bool {
        index(of: send, resumed: resumed).map { !(incoming[send.key.peer]![$0].state.isWaiting) } ?? false
    }

    /// The peer's offer of `send`: the interrupted transfer it resumes, if any (no longer parked).
    /// Its own waiting transfer, or the app's cancel of it, whether or not the offer is RESUMED
    /// (without, the RESOURCE_ACCEPT went with the link); a verdict only for a RESUMED offer
    /// (§7.9). Anything else, also what is kept for another send of the same content, leaves
    /// the offer a new transfer, which may only continue a kept partial (§7.8).
    package func claimIncoming(_ send: Send, resumed: Bool) -> Incoming? {
        let peer = send.key.peer
        guard let index = index(of: send, resumed: resumed) else { return nil }
        let entry = incoming[peer]?.remove(at: index)
        if incoming[peer]?.isEmpty == true { incoming[peer] = nil }
        return entry?.state
    }

    private func index(of send: Send, resumed: Bool) -> Int? {
        incoming[send.key.peer]?.lastIndex { entry in
            guard entry.send == send else { return false }
            if case .completed = entry.state { return resumed }
            return true
        }
    }

    /// The application cancelled a waiting transfer: the resuming offer is refused. Its send and
    /// cut-off receiver, if it waited.
    package func cancelIncoming(_ transfer: Transfer, peer: Bytes16) -> (Send, CutOff)? {
        guard let index = incoming[peer]?.firstIndex(where: { entry in
            if case .waiting(let waiting, _) = entry.state { waiting === transfer } else { false }
        }), let entry = incoming[peer]?[index], case .waiting(_, let cutOff) = entry.state else { return nil }
        incoming[peer]?[index].state = .cancelled
        return (entry.send, cutOff)
    }

    /// Takes out the peer's interrupted transfers parked at or before `parkedBy` (all without
    /// it): the peer left, or resumed and did not offer them again in time.
    package func takeIncoming(for peer: Bytes16, parkedBy: NIODeadline? = nil) -> [Incoming] {
        guard let entries = incoming[peer] else { return [] }
        let isDue = { (entry: IncomingEntry) in parkedBy.map { entry.parked <= $0 } ?? true }
        let left = entries.filter { !isDue($0) }
        incoming[peer] = left.isEmpty ? nil : left
        return entries.filter(isDue).map(\.state)
    }

    package var isEmpty: Bool { outgoing.isEmpty && incoming.isEmpty }
}
