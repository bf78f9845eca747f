/// A peer's place in the session, as the session reports it.
package enum PeerConnectionState: Sendable, Equatable {
    case connecting
    case connected
    /// With the reason when the connection failed or ended for one.
    case notConnected(ConnectionError?)
}
