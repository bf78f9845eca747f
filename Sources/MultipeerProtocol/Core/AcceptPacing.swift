import NIOCore

/// How fast a listener that strangers may flood takes new connections: a token bucket. A
/// flood whose connections reconnect as soon as they are shed would otherwise keep the
/// network thread busy accepting and shedding as fast as it can; paced, the rest wait in the
/// kernel's accept queue (`StrangerListenerOptions.backlog`), and a real peer in that queue is
/// reached within queue length / rate.
package struct AcceptPacing {
    /// Sustained accepts per second, and how many may come at once.
    package static let perSecond = 3_000
    package static let burst = 256

    private let perSecond: Double
    private let burst: Double
    private var tokens: Double
    private var last: NIODeadline?

    package init(perSecond: Int = Self.perSecond, burst: Int = Self.burst) {
        self.perSecond = Double(max(perSecond, 1))
        self.burst = Double(max(burst, 1))
        tokens = self.burst
    }

    /// A connection was accepted at `now`. Returns when the listener may accept again if it must
    /// pause first, or nil when it may go on.
    package mutating func accepted(now: NIODeadline) -> NIODeadline? {
        if let last, now > last {
            tokens = min(burst, tokens + Double((now - last).nanoseconds) / 1e9 * perSecond)
        }
        last = now
        tokens -= 1
        guard tokens < 1 else { return nil }
        // Until one whole token is back.
        return now + .nanoseconds(Int64(((1 - tokens) / perSecond * 1e9).rounded(.up)))
    }
}
