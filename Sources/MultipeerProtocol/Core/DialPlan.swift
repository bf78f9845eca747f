import MultipeerCrypto
import MultipeerWire

/// Whom a dialed link expects to reach, and how it introduces itself.
package struct DialPlan: Sendable, Hashable {
    package let peer: WirePeerID
    package let purpose: Hello.Purpose
    package let token: Bytes16
    /// The leaf certificate the peer must show, when its connection data named one.
    package let fingerprint: SHA256Digest?
    /// Tried in order until one accepts the TCP connection.
    package let endpoints: [WireEndpoint]
    /// The interface index for the endpoints' IPv6 link-local addresses, when the link is known
    /// (an inviter's invitation connection went over it); without it those endpoints are skipped.
    package let linkScope: UInt32?

    package init(_ data: ConnectionData, linkScope: UInt32? = nil) {
        peer = data.peerID
        purpose = .connectionData
        token = data.token
        fingerprint = data.certificateFingerprint
        endpoints = data.endpoints
        self.linkScope = linkScope
    }

    package init(introduced peer: WirePeerID, by introducer: Bytes16, at endpoint: WireEndpoint) {
        self.peer = peer
        purpose = .meshIntroduction
        token = introducer
        fingerprint = nil
        endpoints = [endpoint]
        linkScope = nil
    }
}
