import Foundation
import Logging
import MultipeerSession
import MultipeerWire
import MultipeerProtocol
import NIOCore
import NIOPosix

/// The things Apple's framework fixes silently, with the defaults it would use.
public struct MCSessionConfiguration: Sendable {
    /// Where to accept connections: "0.0.0.0" (every IPv4 interface), "::" (both families, IPv6
    /// link-local included, for links without IPv4), or one address.
    public var listenAddress: String = "0.0.0.0"
    /// Addresses to put in connection data; nil derives them from the interfaces.
    public var advertisedAddresses: [String]?
    /// From TCP connect until the certificate handler is asked.
    public var handshakeTimeout: Duration = .seconds(WireLimits.defaultHandshakeDeadlineSeconds)
    /// How long the certificate handler may take before the peer is rejected.
    public var certificateDecisionTimeout: Duration = .seconds(30)
    /// Silence after which a connected peer is pinged.
    public var keepaliveInterval: Duration = .seconds(WireLimits.defaultKeepaliveIntervalSeconds)
    /// Silence after which a connected peer's link counts as lost: the peer is reported
    /// notConnected then, or, with link recovery, once `linkRecoveryGrace` has passed too.
    public var deadPeerDeadline: Duration = .seconds(WireLimits.defaultDeadPeerDeadlineSeconds)
    /// How long a connected peer whose link was lost without a goodbye (a reset, an address
    /// change, the dead-peer deadline) stays connected while both sides reconnect and resume the
    /// session, with every reliable message delivered once and in order (docs/PROTOCOL.md §7.9;
    /// peers of this library from 0.2 on, over an encrypted connection). Apple's delegate hears
    /// nothing unless the grace passes; `events()` reports `linkInterrupted` and `linkRestored`.
    /// A peer that moved is redialed where another member or, while an `MCNearbyServiceBrowser`
    /// for its service runs in this process, discovery sees it now.
    /// `.zero` turns recovery off: a lost link ends the peer at once.
    public var linkRecoveryGrace: Duration = .seconds(10)
    /// Largest `.unreliable` message sent as one sealed datagram, at most 65,471 bytes. Larger
    /// ones (up to 16 MiB) go over the peer's connection instead, and are dropped for a peer
    /// whose send queue is full: Apple sets no size limit on unreliable messages.
    public var maximumDatagramSize: Int = 8_192
    /// Inbound connections that may be mid-handshake at once; past it the least advanced and
    /// longest silent is closed, so idle or trickling strangers cannot lock real peers out.
    public var maximumPendingConnections: Int = SessionEngineConfiguration.defaultPendingConnections
    /// Reliable bytes queued to one peer and not yet sent (to a peer that can recover a lost
    /// link, not yet acknowledged: docs/PROTOCOL.md §7.9), each message counted with 64 bytes
    /// more than its length; a synchronous `send` past it throws `unavailable` (nothing is
    /// queued), the async `send` waits for room. Acknowledgements are read on the session's
    /// network thread: a task there that sends in a loop must suspend (the async `send` does).
    public var maximumQueuedBytesPerPeer: Int = 32 << 20
    /// Bytes of one peer's messages delivered but not yet taken by the app (every `events()`
    /// stream and the delegate); past it the session stops reading from that peer until the app
    /// has taken half. Its datagrams are dropped meanwhile.
    public var maximumUndeliveredBytesPerPeer: Int = 8 << 20
    /// Where received resources are written (created if missing), under names of the session's
    /// own making; nil: a directory of its own under the system's temporary directory.
    public var resourceDirectory: URL?
    /// Larger incoming resources are refused; the sender's completion gets an error.
    public var maximumIncomingResourceSize: UInt64 = 16 << 30
    /// Incoming resources at once, from all peers; more are refused.
    public var maximumConcurrentIncomingResources: Int = 16
    /// Transfers cut off by a lost connection kept for the sender to resume, and for how long.
    public var resumableTransfers: Int = 16
    public var resumeLifetime: Duration = .seconds(600)
    /// Bytes an `OutputStream` holds before `write` takes less (its peer's windows bound the rest).
    public var streamBufferSize: Int = 256 << 10
    /// Where the session tells what happens to its connections (swift-log): dials, refusals and
    /// their reasons, ends and their reasons, shed connections, and (at debug level) each TLS
    /// handshake's key exchange group and cipher suite. Silent unless the app sets one;
    /// never keys or payloads. Peers appear by display name and the first bytes of their identifier.
    public var logger = Logger(label: "MultipeerConnectivity", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Datagrams per direction before the sender moves to the next key epoch (docs/PROTOCOL.md §8;
    /// 2^32 on the wire). Lowered only to test epoch changes, as the interop harness does.
    @_spi(Testing) public var datagramsPerEpoch: UInt64 = WireLimits.datagramEpochCounterLimit
    /// TLS records a side sends before it updates its keys (TLS 1.3 KeyUpdate). Lowered only to
    /// test key updates.
    @_spi(Testing) public var tlsRecordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate
    /// The thread the session runs on and the pool that reads and writes its resource files; nil:
    /// the process-wide ones. multipeer-bench gives each side threads of its own, to tell the
    /// sides' CPU time apart. The loop must be a NIOPosix one; the pool must be started and
    /// outlive the session.
    package var eventLoop: (any EventLoop)?
    package var fileIOPool: NIOThreadPool?

    public init() {}

    /// Listens and advertises on 127.0.0.1 only: for tests and demos on one machine.
    public static var loopbackOnly: MCSessionConfiguration {
        var configuration = MCSessionConfiguration()
        configuration.listenAddress = "127.0.0.1"
        return configuration
    }
}
