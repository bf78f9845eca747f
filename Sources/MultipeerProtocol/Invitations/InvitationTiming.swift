import MultipeerWire
import NIOCore

/// How long each side of an invitation waits (docs/PROTOCOL.md §7.2). The shells run the
/// timers; the durations are decided here.
package enum InvitationTiming {
    /// The longest an advertiser waits for its application's answer, whatever the inviter asked:
    /// a pending invitation holds one of the listener's few places.
    package static let maximumAnswerWait = TimeAmount.seconds(120)

    /// How much longer than its own timeout an inviter waits for the answer, so that the
    /// advertiser's timedOut answer arrives first; no more, since the app chose the timeout.
    package static let answerGrace = TimeAmount.seconds(2)

    /// How long the advertiser waits for its application: the inviter's timeout, capped.
    package static func advertiserWait(timeoutMilliseconds: UInt32) -> TimeAmount {
        min(.milliseconds(Int64(timeoutMilliseconds)), maximumAnswerWait)
    }

    /// How long the inviter waits for the answer once the advertiser has answered HELLO.
    package static func inviterWait(timeoutMilliseconds: UInt32, handshakeTimeout: TimeAmount) -> TimeAmount {
        // Below 2^63 ns for any UInt32 of milliseconds plus at most 2 s.
        .nanoseconds(Int64(timeoutMilliseconds) * 1_000_000 + min(handshakeTimeout, answerGrace).nanoseconds)
    }

    /// After an acceptance, how long the inviter waits for the session connection it dials:
    /// a handshake, both sides' trust decisions, and a margin for the dial itself.
    package static func connectionAfterAcceptance(handshakeTimeout: TimeAmount, trustTimeout: TimeAmount) -> TimeAmount {
        let parts = [handshakeTimeout.nanoseconds, trustTimeout.nanoseconds, trustTimeout.nanoseconds, TimeAmount.seconds(5).nanoseconds]
        // Saturating: the timeouts are the app's to choose.
        return .nanoseconds(parts.reduce(Int64(0)) { sum, part in
            let (total, overflow) = sum.addingReportingOverflow(max(part, 0))
            return overflow ? .max : total
        })
    }
}
