import Logging
import MultipeerCrypto
import MultipeerWire

/// Everything one connection's handshake needs to know about the local side.
package struct ConnectionConfiguration: Sendable {
    package enum Role: Sendable { case dialer, listener }

    /// The session's answer to a dialer's HELLO (`ConnectionAction.admissionRequested`), before trust is asked.
    package enum Admission: Sendable, Equatable {
        case admit
        /// A HELLO with purpose `resumption` named a suspended member (docs/PROTOCOL.md §7.9).
        case resume(ResumptionGrant)
        case refuse(GoodbyeReason)
    }

    /// What resuming a suspended member needs from its old session: its keys, how many of the
    /// peer's messages we delivered, and the peer's leaf certificate (nil: it had no identity),
    /// which the new connection must show again.
    package struct ResumptionGrant: Sendable, Hashable {
        package let keys: ResumptionKeys
        package let delivered: UInt64
        package let peerCertificateFingerprint: [UInt8]?

        package init(keys: ResumptionKeys, delivered: UInt64, peerCertificateFingerprint: [UInt8]?) {
            self.keys = keys
            self.delivered = delivered
            self.peerCertificateFingerprint = peerCertificateFingerprint
        }

        package static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.keys === rhs.keys && lhs.delivered == rhs.delivered && lhs.peerCertificateFingerprint == rhs.peerCertificateFingerprint
        }

        package func hash(into hasher: inout Hasher) {
            hasher.combine(ObjectIdentifier(keys))
            hasher.combine(delivered)
        }
    }

    package var role: Role
    package var localPeer: WirePeerID
    package var encryptionPreference: WireEncryptionPreference
    /// The session's TLS contexts, which also carry its identity (or none).
    package var tls: TLSContext
    /// The dialer's reason to connect; the listener always answers with `.answer`.
    package var purpose: Hello.Purpose
    package var token: Bytes16
    package var listenPort: UInt16
    package var datagramPort: UInt16
    package var datagramReceiverID: UInt32
    package var recordsPerKeyUpdate: UInt64
    /// Dialer only: the peer identifier the listener's HELLO must carry (the one the connection
    /// data or introduction named); nil accepts any (docs/PROTOCOL.md §9.3).
    package var expectedPeer: Bytes16?
    /// Dialer only: SHA-256 of the listener's leaf certificate (DER) from its connection data,
    /// checked before our HELLO (and its token) goes out; nil pins nothing (docs/PROTOCOL.md §9.3).
    package var expectedCertificateFingerprint: SHA256Digest?
    /// Dialer with purpose `invitation`: the INVITATION sent right after HELLO (docs/PROTOCOL.md §7.2).
    package var invitation: Invitation?
    /// Dialer with purpose `resumption`: the suspended member's old session (its keys' ID is the
    /// token); `expectedPeer` and `expectedCertificateFingerprint` name the peer as it was.
    package var resumption: ResumptionGrant?
    /// The highest protocol version this side offers in its preamble (docs/PROTOCOL.md §3, §13).
    package var maxProtocolVersion: UInt8 = WireLimits.maxProtocolVersion
    /// Hears what TLS has to say once per process (the record layer guard's verdict).
    package var logger: Logger
    /// Fresh random bytes (the pairing nonce); the system's CSPRNG unless a test injects its own.
    package var randomBytes: @Sendable (Int) -> [UInt8] = { count in
        // Eight bytes a draw: each draw is a system call, and every accepted connection makes a nonce.
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count { withUnsafeBytes(of: generator.next() as UInt64) { bytes += $0 } }
        return Array(bytes.prefix(count))
    }

    package init(
        role: Role,
        localPeer: WirePeerID,
        encryptionPreference: WireEncryptionPreference,
        tls: TLSContext,
        purpose: Hello.Purpose? = nil,
        token: Bytes16 = .zero,
        listenPort: UInt16 = 0,
        datagramPort: UInt16 = 0,
        datagramReceiverID: UInt32 = 0,
        recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate,
        expectedPeer: Bytes16? = nil,
        expectedCertificateFingerprint: SHA256Digest? = nil,
        invitation: Invitation? = nil,
        resumption: ResumptionGrant? = nil,
        logger: Logger = Logger(label: "MultipeerProtocol", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.role = role
        self.localPeer = localPeer
        self.encryptionPreference = encryptionPreference
        self.tls = tls
        self.purpose = purpose ?? (role == .dialer ? .connectionData : .answer)
        self.token = token
        self.listenPort = listenPort
        self.datagramPort = datagramPort
        self.datagramReceiverID = datagramReceiverID
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        self.expectedPeer = expectedPeer
        self.expectedCertificateFingerprint = expectedCertificateFingerprint
        self.invitation = invitation
        self.resumption = resumption
        self.logger = logger
    }

    var hasIdentity: Bool { tls.identity != nil }
}
