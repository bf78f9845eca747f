import MultipeerWire
import NIOCore

/// When to PING an idle peer and when to give up on a silent one (docs/PROTOCOL.md §7.7),
/// sans-I/O: the connection's shell calls `tick` on a timer and `received` on every read.
package struct KeepaliveClock {
    package enum Due: Equatable {
        case nothing
        case ping
        case peerDead
    }

    let policy: KeepalivePolicy
    private var lastReceived: NIODeadline
    private var lastPing = NIODeadline.distantPast

    package init(policy: KeepalivePolicy, now: NIODeadline) {
        self.policy = policy
        lastReceived = now
    }


    package mutating func received(at now: NIODeadline) { lastReceived = now }

    /// `readsHeld`: our application holds up reading, so the peer's data and PINGs wait unread and
    /// its silence is ours; the dead-peer clock restarts when reading resumes. We still PING, so
    /// the peer, which reads, keeps seeing us alive.
    package mutating func tick(now: NIODeadline, readsHeld: Bool) -> Due {
        if readsHeld { lastReceived = now }
        if now - lastReceived >= policy.deadPeerDeadline { return .peerDead }
        guard readsHeld || now - lastReceived >= policy.interval, now - lastPing >= policy.interval else { return .nothing }
        lastPing = now
        return .ping
    }
}

/// How often to probe an idle peer, and when to give up on a silent one.
package struct KeepalivePolicy: Sendable {
    package var interval: TimeAmount
    package var deadPeerDeadline: TimeAmount

    package init(
        interval: TimeAmount = .seconds(Int64(WireLimits.defaultKeepaliveIntervalSeconds)),
        deadPeerDeadline: TimeAmount = .seconds(Int64(WireLimits.defaultDeadPeerDeadlineSeconds))
    ) {
        self.interval = interval
        self.deadPeerDeadline = deadPeerDeadline
    }

    /// Checks run four times per interval, so a dead peer is noticed at most a quarter interval late.
    package var tick: TimeAmount { .nanoseconds(max(interval.nanoseconds / 4, 1_000_000)) }
}
