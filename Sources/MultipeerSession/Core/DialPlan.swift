import MultipeerCrypto
import MultipeerWire

/// Whom a dialed link expects to reach, and how it introduces itself.
public struct DialPlan: Sendable, Hashable {
    public let peer: WirePeerID
    public let purpose: Hello.Purpose
    public let token: Bytes16
    /// The leaf certificate the peer must show, when its connection data named one.
    public let fingerprint: SHA256Digest?
    /// Tried in order until one accepts the TCP connection.
    public let endpoints: [WireEndpoint]
    /// The interface index for the endpoints' IPv6 link-local addresses, when the link is known
    /// (an inviter's invitation connection went over it); without it those endpoints are skipped.
    public let linkScope: UInt32?

    public init(_ data: ConnectionData, linkScope: UInt32? = nil) {
        peer = data.peerID
        purpose = .connectionData
        token = data.token
        fingerprint = data.certificateFingerprint
        endpoints = data.endpoints
        self.linkScope = linkScope
    }

    public init(introduced peer: WirePeerID, by introducer: Bytes16, at endpoint: WireEndpoint) {
        self.peer = peer
        purpose = .meshIntroduction
        token = introducer
        fingerprint = nil
        endpoints = [endpoint]
        linkScope = nil
    }
}
