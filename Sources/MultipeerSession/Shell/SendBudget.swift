import MultipeerWire
import Synchronization
import MultipeerProtocol

/// The connected peers, readable from any thread, with the bytes of reliable messages queued to
/// each and not yet handed to its socket (or, for a member that keeps them, not yet
/// acknowledged), each message charged `DeliveryLedger.entryCharge` beyond its bytes. `send` reserves room here before anything is queued,
/// so the queue per peer never exceeds its limit; async senders wait here for room.
final class SendBudget: Sendable {
    private struct Slot {
        let peer: WirePeerID
        /// Whether the peer announced a datagram port (HELLO datagramPort != 0).
        let acceptsDatagrams: Bool
        var queued = 0
        var waiters: [UnsafeContinuation<Void, Never>] = []
        /// `waitForAcknowledgements` callers, resumed once the queue is down to `paceLimit`.
        var pacers: [UnsafeContinuation<Void, Never>] = []
    }

    let limitPerPeer: Int
    private let slots = Mutex<[Bytes16: Slot]>([:])

    init(limitPerPeer: Int) { self.limitPerPeer = limitPerPeer }

    /// Async senders on the session's network thread wait while the queue is above this, so that
    /// the thread reads the acknowledgements that empty it: a task there that never suspends
    /// would keep the whole queue, unacknowledged, in memory. They go on as soon as it is back
    /// under, so kept messages are let go one by one rather than in bursts.
    var paceLimit: Int { limitPerPeer / 16 }

    enum Refusal: Error {
        case notConnected([Bytes16])
        case full([Bytes16])
    }

    var peers: [WirePeerID] { slots.withLock { $0.values.map(\.peer) } }

    func queuedBytes(to peer: Bytes16) -> Int { slots.withLock { $0[peer]?.queued ?? 0 } }

    func add(_ peer: WirePeerID, acceptsDatagrams: Bool) {
        slots.withLock { $0[peer.identifier] = Slot(peer: peer, acceptsDatagrams: acceptsDatagrams) }
    }

    /// A suspended member resumed on a new link: its queue and waiters stay.
    func update(_ peer: Bytes16, acceptsDatagrams: Bool) {
        slots.withLock { slots in
            guard let slot = slots[peer] else { return }
            slots[peer] = Slot(peer: slot.peer, acceptsDatagrams: acceptsDatagrams, queued: slot.queued, waiters: slot.waiters, pacers: slot.pacers)
        }
    }

    /// The peers a datagram cannot go to: those not connected, and those that announced no
    /// datagram port. One lock and one lookup a peer, for every datagram sent.
    func datagramRefusals(_ peers: [Bytes16]) -> (notConnected: [Bytes16], withoutDatagrams: [Bytes16]) {
        slots.withLock { slots in
            var notConnected: [Bytes16] = []
            var withoutDatagrams: [Bytes16] = []
            for peer in peers {
                guard let slot = slots[peer] else {
                    notConnected.append(peer)
                    continue
                }
                if !slot.acceptsDatagrams { withoutDatagrams.append(peer) }
            }
            return (notConnected, withoutDatagrams)
        }
    }

    /// Forgets the peer; its waiting senders resume (and then find it gone).
    func remove(_ peer: Bytes16) {
        let waiters = slots.withLock { slots in slots.removeValue(forKey: peer).map { $0.waiters + $0.pacers } ?? [] }
        for waiter in waiters { waiter.resume() }
    }

    func removeAll() {
        let waiters = slots.withLock { slots in
            defer { slots.removeAll() }
            return slots.values.flatMap { $0.waiters + $0.pacers }
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Reserves `bytes` for each peer, all or none. A message always fits an empty queue, so any
    /// message up to the protocol's limit can be sent.
    func reserve(_ bytes: Int, for peers: [Bytes16]) throws(Refusal) {
        let refusal = slots.withLock { slots -> Refusal? in
            if peers.count == 1 {
                // The common case, with one lookup.
                guard let index = slots.index(forKey: peers[0]) else { return .notConnected(peers) }
                let queued = slots.values[index].queued
                guard queued == 0 || queued + bytes <= limitPerPeer else { return .full(peers) }
                slots.values[index].queued = queued + bytes
                return nil
            }
            // Checked without building arrays first: this runs for every message sent.
            var fits = true
            for peer in peers {
                guard let queued = slots[peer]?.queued else {
                    return .notConnected(peers.filter { slots[$0] == nil })
                }
                if queued > 0 && queued + bytes > limitPerPeer { fits = false }
            }
            guard fits else { return .full(peers.filter { slots[$0]!.queued > 0 && slots[$0]!.queued + bytes > limitPerPeer }) }
            for peer in peers { slots[peer]?.queued += bytes }
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Bytes handed to the socket (or dropped with a closed link): room for more.
    func release(_ bytes: Int, for peer: Bytes16) {
        let waiters = slots.withLock { slots -> [UnsafeContinuation<Void, Never>] in
            // One lookup: this runs for every message written.
            guard let index = slots.index(forKey: peer) else { return [] }
            slots.values[index].queued -= bytes
            var resumed: [UnsafeContinuation<Void, Never>] = []
            if slots.values[index].queued <= paceLimit, !slots.values[index].pacers.isEmpty {
                resumed = slots.values[index].pacers
                slots.values[index].pacers = []
            }
            guard slots.values[index].queued <= limitPerPeer / 2, !slots.values[index].waiters.isEmpty else { return resumed }
            defer { slots.values[index].waiters = [] }
            return resumed + slots.values[index].waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Senders waiting in `waitForAcknowledgements` for `peer`.
    func pacerCount(for peer: Bytes16) -> Int { slots.withLock { $0[peer]?.pacers.count ?? 0 } }

    /// Returns at once unless a peer's queue is above `paceLimit`; then once it is back under,
    /// or the peer is gone.
    func waitForAcknowledgements(for peers: [Bytes16]) async {
        for peer in peers {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                let ready = slots.withLock { slots -> Bool in
                    guard let slot = slots[peer], slot.queued > paceLimit else { return true }
                    slots[peer]!.pacers.append(continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    /// Returns once every peer's queue has room for `bytes`, or the peer is gone.
    func waitForRoom(_ bytes: Int, for peers: [Bytes16]) async {
        for peer in peers {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                let ready = slots.withLock { slots -> Bool in
                    guard let slot = slots[peer], slot.queued > 0, slot.queued + bytes > limitPerPeer else { return true }
                    slots[peer]!.waiters.append(continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }
}
