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
    /// Tried in order until one accepts the TCP connection (see `attemptDelay`).
    package let endpoints: [WireEndpoint]
    /// The interface index for the endpoints' IPv6 link-local addresses, when the link is known
    /// (an inviter's invitation connection went over it); without it those endpoints are skipped.
    package let linkScope: UInt32?
    /// Purpose `resumption`: the suspended member's old session (docs/PROTOCOL.md §7.9).
    package let resumption: ConnectionConfiguration.ResumptionGrant?
    /// How long the TCP connect, and the whole handshake, may take; nil: the handshake deadline.
    /// A resumption gives up sooner, so that a dial to a stale or stalled address does not hold
    /// up the next one for long.
    package let connectTimeout: TimeAmount?
    package let handshakeTimeout: TimeAmount?
    /// When set, the next endpoint's connect starts this long after the one before it began,
    /// without waiting for that one to fail (RFC 8305's connection attempt delay); the first TCP
    /// connection carries the link. Nil: one endpoint at a time.
    package let attemptDelay: TimeAmount?

    package static let resumptionConnectTimeout = TimeAmount.seconds(2)
    package static let resumptionHandshakeTimeout = TimeAmount.seconds(3)
    /// A resumption's endpoints are the old address, a member's word and discovery's, any of
    /// them dead after a move: each gets a quarter second to its own before the next starts.
    package static let resumptionAttemptDelay = TimeAmount.milliseconds(250)

    package init(_ data: ConnectionData, linkScope: UInt32? = nil) {
        peer = data.peerID
        purpose = .connectionData
        token = data.token
        fingerprint = data.certificateFingerprint
        endpoints = data.endpoints
        self.linkScope = linkScope
        resumption = nil
        connectTimeout = nil
        handshakeTimeout = nil
        attemptDelay = nil
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
        handshakeTimeout = nil
        attemptDelay = nil
    }

    /// Resuming a suspended member where it may listen now (in order): the peer must show the
    /// same certificate, and the HELLO names the session by its resumption ID.
    /// Nil when the certificate's fingerprint is not a SHA-256 digest: no dial then, rather than
    /// one without the pin.
    package init?(
        resuming peer: WirePeerID, id: Bytes16, at endpoints: [WireEndpoint], linkScope: UInt32? = nil,
        grant: ConnectionConfiguration.ResumptionGrant
    ) {
        if let certificate = grant.peerCertificateFingerprint {
            guard let digest = try? SHA256Digest(bytes: certificate) else { return nil }
            fingerprint = digest
        } else {
            fingerprint = nil
        }
        self.peer = peer
        purpose = .resumption
        token = id
        self.endpoints = endpoints
        self.linkScope = linkScope
        resumption = grant
        connectTimeout = Self.resumptionConnectTimeout
        handshakeTimeout = Self.resumptionHandshakeTimeout
        attemptDelay = Self.resumptionAttemptDelay
    }
}
