import MultipeerCrypto
import MultipeerWire
import NIOCore

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
    /// Purpose `resumption`: the suspended member's old session (docs/PROTOCOL.md §7.9).
    package let resumption: ConnectionConfiguration.ResumptionGrant?
    /// How long the TCP connect may take; nil: the handshake deadline. A resumption gives up
    /// sooner, so that a dial to a stale address does not hold up the next one.
    package let connectTimeout: TimeAmount?

    package static let resumptionConnectTimeout = TimeAmount.seconds(2)

    package init(_ data: ConnectionData, linkScope: UInt32? = nil) {
        peer = data.peerID
        purpose = .connectionData
        token = data.token
        fingerprint = data.certificateFingerprint
        endpoints = data.endpoints
        self.linkScope = linkScope
        resumption = nil
        connectTimeout = nil
    }

    package init(introduced peer: WirePeerID, by introducer: Bytes16, at endpoint: WireEndpoint) {
        self.peer = peer
        purpose = .meshIntroduction
        token = introducer
        fingerprint = nil
        endpoints = [endpoint]
        linkScope = nil
        resumption = nil
        connectTimeout = nil
    }

    /// Resuming a suspended member where it last listened: the peer must show the same
    /// certificate, and the HELLO names the session by its resumption ID.
    package init(resuming peer: WirePeerID, id: Bytes16, at endpoint: WireEndpoint, grant: ConnectionConfiguration.ResumptionGrant) {
        self.peer = peer
        purpose = .resumption
        token = id
        fingerprint = grant.peerCertificateFingerprint.flatMap { try? SHA256Digest(bytes: $0) }
        endpoints = [endpoint]
        linkScope = nil
        resumption = grant
        connectTimeout = Self.resumptionConnectTimeout
    }
}
