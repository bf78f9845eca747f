/// How an invitation ended for the inviter (docs/PROTOCOL.md §7.2).
package enum InvitationOutcome: Sendable, Equatable {
    /// Accepted: the session is dialing the invitee with the connection data it sent; the
    /// peer's state events tell whether it connects.
    case accepted
    case declined
    /// The invitee's application did not answer in time, or no answer came at all.
    case timedOut
    case sessionFull
    case encryptionIncompatible
    /// No connection to any of the invitee's addresses, or it ended without an answer.
    case unreachable(String)
    /// The acceptance named another peer, or its connection data was not made for us.
    case invalidAnswer(String)
}
