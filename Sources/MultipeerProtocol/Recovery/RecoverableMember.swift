import MultipeerCrypto
import MultipeerWire
import NIOCore

/// A member whose session with us can outlive its connection (docs/PROTOCOL.md §7.9): version 2
/// over TLS, with link recovery on. Holds what a new connection resumes: the keys of the last
/// one, the peer's certificate, where it listens, and the delivery ledger.
final class RecoverableMember {
    let peer: WirePeerID
    /// From the connection that made the member; a resumption keeps them (§7.9).
    let keys: ResumptionKeys
    /// The peer's leaf certificate; a resumption must show the same one (nil: it has no identity).
    let certificateFingerprint: [UInt8]?
    var listenEndpoint: WireEndpoint?
    /// The interface its listen endpoint is reached on, when that is an IPv6 link-local address.
    var linkScope: UInt32?
    /// Where another member that reaches it now says it listens (it may have moved, §7.9), said
    /// while it is suspended or shortly before. Redials try it first, then `listenEndpoint`.
    var introducedEndpoint: WireEndpoint?
    /// When `introducedEndpoint` was last said (it may come before we notice the loss).
    var introducedAt: NIODeadline?
    /// When news last replaced a redial of this suspension (at most one per redial step).
    var newsRedial: NIODeadline?
    /// While suspended: where discovery (a browser in this process) sees its host now, with the
    /// port it listens on; when both sides moved, nobody else can say. Tried after the
    /// introduced endpoint and `listenEndpoint`, each redial starting at the next one: anyone on
    /// the link can answer mDNS for the member, and a host that stalls must keep neither the old
    /// address nor the other discovered ones from being tried.
    var discoveredEndpoints: [WireEndpoint] = []
    /// Redials made during this member's suspensions: where the discovered endpoints start.
    var redials = 0

    /// At most this many discovered addresses are kept for redials, each costing a connect.
    static let maxDiscoveredEndpoints = 4

    /// Where the last resumption dial's handshake failed (what answered there was not the
    /// member, or stalled): the next redial tries it last, so that the first TCP connection, which
    /// carries the dial, is not there again. For that redial only: a handshake that timed out
    /// under load may have been the member's.
    var failedEndpoint: WireEndpoint?

    /// News of where the member listens now (or again).
    func introduced(at endpoint: WireEndpoint, now: NIODeadline) {
        introducedEndpoint = endpoint
        introducedAt = now
    }

    /// A resumption dial's handshake failed at `endpoint`.
    func handshakeFailed(at endpoint: WireEndpoint) {
        failedEndpoint = endpoint
    }

    /// A redial to `redialEndpoints` went: the next starts at the next discovered endpoint, and
    /// a failed endpoint's turn at the end is over.
    func redialStarted() {
        redials += 1
        failedEndpoint = nil
    }

    /// Where a redial goes, in order; empty when the member accepts no connections.
    var redialEndpoints: [WireEndpoint] {
        var endpoints: [WireEndpoint] = []
        let start = discoveredEndpoints.isEmpty ? 0 : redials % discoveredEndpoints.count
        let discovered = discoveredEndpoints[start...] + discoveredEndpoints[..<start]
        let candidates = [introducedEndpoint, listenEndpoint].compactMap { $0 } + discovered
        for endpoint in candidates where endpoint.isListening && endpoint != failedEndpoint && !endpoints.contains(endpoint) {
            endpoints.append(endpoint)
        }
        if let failed = failedEndpoint, candidates.contains(failed), failed.isListening { endpoints.append(failed) }
        return endpoints
    }
    // Exclusivity unchecked: touched for every message, on the engine's loop, by code that does
    // not call back into the core.
    @exclusivity(unchecked) var ledger = DeliveryLedger()
    /// Its streams and ours, which outlive the connection too (§7.10).
    let streams = MemberStreams()
    /// Set while no connection carries the member: since when, why, and which suspension this is
    /// (so a late timer of an earlier one does nothing).
    var suspension: (since: NIODeadline, error: ConnectionError, number: Int)?
    var acknowledgementArmed = false

    init(peer: WirePeerID, keys: ResumptionKeys, certificateFingerprint: [UInt8]?, listenEndpoint: WireEndpoint?) {
        self.peer = peer
        self.keys = keys
        self.certificateFingerprint = certificateFingerprint
        self.listenEndpoint = listenEndpoint
    }

    var resumptionID: Bytes16 { Bytes16(bytes: keys.id)! }

    /// What a resumption of this member offers or grants.
    func grant() -> ConnectionConfiguration.ResumptionGrant {
        ConnectionConfiguration.ResumptionGrant(keys: keys, delivered: ledger.resuming(), peerCertificateFingerprint: certificateFingerprint)
    }
}

/// Link recovery's timing (docs/PROTOCOL.md §7.9); each side's own choice, not the wire's.
package struct RecoveryPolicy: Sendable, Equatable {
    /// How long a member whose link was lost stays connected while both sides reconnect; zero:
    /// no recovery (a lost link ends the member at once; acknowledgements still go, as §7.9 asks).
    package var grace: TimeAmount
    /// When to dial again after the loss, from the loss; the last keeps repeating within the grace.
    package var redialDelays: [TimeAmount]
    /// Messages delivered without an acknowledgement due are acknowledged this long after the first.
    package var acknowledgementDelay: TimeAmount

    package init(
        grace: TimeAmount = .seconds(10),
        redialDelays: [TimeAmount] = [.zero, .milliseconds(250), .milliseconds(500), .seconds(1)],
        acknowledgementDelay: TimeAmount = .milliseconds(50)
    ) {
        self.grace = grace
        self.redialDelays = redialDelays.isEmpty ? [.seconds(1)] : redialDelays
        self.acknowledgementDelay = acknowledgementDelay
    }

    package static let off = RecoveryPolicy(grace: .zero)

    package var isEnabled: Bool { grace > .zero }

    /// The first redials, from the loss (increasing); after the last, one every `redialStep`.
    var redialOffsets: [TimeAmount] {
        var offsets: [TimeAmount] = []
        for delay in redialDelays { offsets.append(max(offsets.last ?? .zero, delay)) }
        return offsets
    }

    var redialStep: TimeAmount { max(redialDelays.last!, .milliseconds(100)) }

    /// When redial `attempt` (from 0) comes, from the loss.
    func redialOffset(_ attempt: Int) -> TimeAmount {
        let offsets = redialOffsets
        let beyond = attempt - (offsets.count - 1)
        return offsets[min(attempt, offsets.count - 1)] + (beyond > 0 ? redialStep * Int64(beyond) : .zero)
    }
}
