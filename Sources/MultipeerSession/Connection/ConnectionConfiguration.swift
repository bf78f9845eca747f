import MultipeerCrypto
import MultipeerWire

/// Everything one connection's handshake needs to know about the local side.
public struct ConnectionConfiguration: Sendable {
    public enum Role: Sendable { case dialer, listener }

    /// The listener's answer to a dialer's HELLO, before trust is asked.
    public enum Admission: Sendable, Equatable {
        case admit
        case refuse(GoodbyeReason)
    }

    public var role: Role
    public var localPeer: WirePeerID
    public var encryptionPreference: WireEncryptionPreference
    /// The session's TLS contexts, which also carry its identity (or none).
    public var tls: TLSContext
    /// The dialer's reason to connect; the listener always answers with `.answer`.
    public var purpose: Hello.Purpose
    public var token: Bytes16
    public var listenPort: UInt16
    public var datagramPort: UInt16
    public var datagramReceiverID: UInt32
    public var recordsPerKeyUpdate: UInt64
    /// Dialer only: the peer identifier the listener's HELLO must carry (the one the connection
    /// data or introduction named); nil accepts any (docs/PROTOCOL.md §9.3).
    public var expectedPeer: Bytes16?
    /// Dialer only: SHA-256 of the listener's leaf certificate (DER) from its connection data,
    /// checked before our HELLO (and its token) goes out; nil pins nothing (docs/PROTOCOL.md §9.3).
    public var expectedCertificateFingerprint: SHA256Digest?
    /// Consulted by a listener when the dialer's HELLO arrives.
    public var admission: @Sendable (Hello) -> Admission
    /// Dialer with purpose `invitation`: the INVITATION sent right after HELLO (docs/PROTOCOL.md §7.2).
    public var invitation: Invitation?
    /// Fresh random bytes (the pairing nonce); the system's CSPRNG unless a test injects its own.
    public var randomBytes: @Sendable (Int) -> [UInt8] = { count in
        // Eight bytes a draw: each draw is a system call, and every accepted connection makes a nonce.
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count { withUnsafeBytes(of: generator.next() as UInt64) { bytes += $0 } }
        return Array(bytes.prefix(count))
    }

    public init(
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
        admission: @escaping @Sendable (Hello) -> Admission = { _ in .admit },
        invitation: Invitation? = nil
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
        self.admission = admission
        self.invitation = invitation
    }

    var hasIdentity: Bool { tls.identity != nil }
}
