#if canImport(Glibc)
import Glibc
#endif
import Logging
import MultipeerCrypto
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// What a session engine needs to know; MCSession builds it from its package configuration.
package struct SessionEngineConfiguration: Sendable {
    package var localPeer: WirePeerID
    package var encryptionPreference: WireEncryptionPreference
    package var tls: TLSContext
    /// Where to accept connections: "0.0.0.0" (all IPv4), "::" (all), or one address such as "127.0.0.1".
    package var listenHost: String
    /// Addresses to put in connection data; nil derives them from the listener and the interfaces.
    package var advertisedAddresses: [String]?
    package var trustTimeout: TimeAmount
    package var handshakeTimeout: TimeAmount
    package var keepalive: KeepalivePolicy
    package var recordsPerKeyUpdate: UInt64
    /// Largest unreliable message accepted for sending (at most 65,471 bytes).
    package var maximumDatagramMessage: Int
    package var datagramLimits: DatagramPeerState.Limits
    /// Inbound connections allowed at once before they are connected; past it, the least
    /// advanced and longest silent is closed to make room (so strangers cannot lock peers out).
    package var maximumPendingConnections: Int
    package static let defaultPendingConnections = 64
    /// Reliable bytes queued to one peer and not yet handed to its socket. A synchronous send past
    /// it is refused with `queueFull`; an async send waits. One message always fits an empty queue.
    package var maximumQueuedBytesPerPeer: Int
    /// Message bytes from one peer delivered to the app and not yet taken; past it the session
    /// stops reading from that peer (and drops its datagrams) until the app catches up.
    package var maximumUndeliveredBytesPerPeer: Int
    /// Streams and resources: buffers, where received files go, what is accepted.
    package var channels: ChannelConfiguration
    /// Bursts of datagrams to one peer go to the kernel as one write that it cuts into the same
    /// datagrams (UDP GSO), and arrive joined (UDP GRO), where the system supports it.
    package var datagramSegmentationOffload: Bool
    /// Connection life cycle, refusals and their reasons; never keys or payloads.
    package var logger: Logger
    /// Link recovery (docs/PROTOCOL.md §7.9): how long a member whose link was lost stays
    /// connected while both sides reconnect; `.off` ends it at once.
    package var recovery: RecoveryPolicy

    package init(
        localPeer: WirePeerID,
        encryptionPreference: WireEncryptionPreference,
        tls: TLSContext,
        listenHost: String = "0.0.0.0",
        advertisedAddresses: [String]? = nil,
        trustTimeout: TimeAmount = .seconds(30),
        handshakeTimeout: TimeAmount = .seconds(Int64(WireLimits.defaultHandshakeDeadlineSeconds)),
        keepalive: KeepalivePolicy = KeepalivePolicy(),
        recordsPerKeyUpdate: UInt64 = WireLimits.tlsRecordsPerKeyUpdate,
        maximumDatagramMessage: Int = 8_192,
        datagramLimits: DatagramPeerState.Limits = .init(),
        maximumPendingConnections: Int = defaultPendingConnections,
        maximumQueuedBytesPerPeer: Int = 32 << 20,
        maximumUndeliveredBytesPerPeer: Int = 8 << 20,
        channels: ChannelConfiguration = ChannelConfiguration(),
        datagramSegmentationOffload: Bool = true,
        recovery: RecoveryPolicy = RecoveryPolicy(),
        logger: Logger = Logger(label: "MultipeerSession", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.localPeer = localPeer
        self.encryptionPreference = encryptionPreference
        self.tls = tls
        self.listenHost = listenHost
        self.advertisedAddresses = advertisedAddresses
        self.trustTimeout = trustTimeout
        self.handshakeTimeout = handshakeTimeout
        self.keepalive = keepalive
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        self.maximumDatagramMessage = min(maximumDatagramMessage, WireLimits.maxSealedDatagramMessage)
        self.datagramLimits = datagramLimits
        self.maximumPendingConnections = max(1, maximumPendingConnections)
        self.maximumQueuedBytesPerPeer = max(1, maximumQueuedBytesPerPeer)
        self.maximumUndeliveredBytesPerPeer = max(1, maximumUndeliveredBytesPerPeer)
        self.channels = channels
        self.datagramSegmentationOffload = datagramSegmentationOffload
        self.recovery = recovery
        self.logger = logger
    }
}

/// Whether datagrams travel in segmented writes and arrive joined (`SessionEngine.datagramOffload`).
package struct DatagramOffloadReport: Sendable, Equatable {
    package let segmentedWrites: Int
    package let joinedReceived: Int
    /// Every datagram read from the socket, whatever became of it.
    package let read: Int
    package let segmenting: Bool
    package let refusals: Int
    package let largestSegment: Int
    package let socketOpen: Bool
}

package enum SessionEngineEvent: Sendable {
    case peerStateChanged(WirePeerID, PeerConnectionState)
    /// Ask the application; call `answer` once, from any thread.
    case trustRequested(PeerTrustRequest, answer: @Sendable (Bool) -> Void)
    /// Call `receipt.consumed()` once the application has taken the message: until then its bytes
    /// count against the peer's receive budget.
    case messageReceived(ByteBuffer, from: WirePeerID, receipt: DeliveryReceipt)
    /// A peer's connection was refused before its app or ours was asked (session full, stale token).
    case peerRefused(WirePeerID, GoodbyeReason)
    /// A connected peer's link was lost and is being recovered (docs/PROTOCOL.md §7.9): it stays
    /// connected; `linkRestored`, or `peerStateChanged` notConnected once the grace has passed.
    case linkInterrupted(WirePeerID)
    case linkRestored(WirePeerID)
    /// A peer opened a stream to us; read it (or cancel it) promptly: unread bytes hold its window.
    case streamOpened(ByteStreamReader)
    /// A peer's resource is arriving; progress and cancel through the transfer.
    case resourceStarted(ResourceTransfer)
    /// An incoming resource ended: the path of the verified file, which now belongs to whoever
    /// handles the event (move it or remove it), or why it failed (and then no file is left).
    case resourceFinished(ResourceTransfer, Result<String, TransferError>)
}

/// Streams and resources (docs/PROTOCOL.md §7.6, §7.8).
package struct ChannelConfiguration: Sendable {
    /// Bytes a stream writer holds before `write` waits or takes less.
    package var streamBufferLimit: Int
    /// What a peer may send on one channel before the app has taken some (a WINDOW_UPDATE
    /// raises the protocol's initial 256 KiB when the channel opens, if this is larger). Keep it
    /// well below the connection window, so one stalled reader cannot stop the other channels.
    /// 1 MiB and 4 MiB by default: with the initial windows a stream ran at half the rate of
    /// reliable messages on loopback (docs/benchmarks/HISTORY.md, "Channel windows"); larger ones
    /// also queue more ahead of a small message sent meanwhile.
    package private(set) var channelReceiveWindow: UInt32
    /// What a peer may send on all its channels together before the app has taken some: the
    /// most channel data from one peer held in memory at once.
    package private(set) var connectionReceiveWindow: UInt32
    /// Where incoming resources are written, under names of the session's own making; created
    /// if missing. The default is a directory of its own under the system's temporary directory.
    package var resourceDirectory: String
    /// Larger offers are refused (STREAM_RESET 3).
    package var maximumIncomingResourceSize: UInt64
    /// Incoming resources at once, from all peers; more are refused.
    package var maximumConcurrentIncomingResources: Int
    /// Incoming resources at once from one peer, so one peer cannot take every place.
    package var maximumIncomingResourcesPerPeer: Int
    /// Interrupted incoming transfers kept for the sender to resume, and for how long.
    package var resumableTransfers: Int
    package var resumeLifetime: TimeAmount

    package init(
        streamBufferLimit: Int = 256 << 10,
        channelReceiveWindow: UInt32 = 1 << 20,
        connectionReceiveWindow: UInt32 = 4 << 20,
        resourceDirectory: String? = nil,
        maximumIncomingResourceSize: UInt64 = 16 << 30,
        maximumConcurrentIncomingResources: Int = 16,
        maximumIncomingResourcesPerPeer: Int = 4,
        resumableTransfers: Int = 16,
        resumeLifetime: TimeAmount = .minutes(10)
    ) {
        self.streamBufferLimit = max(1, streamBufferLimit)
        self.channelReceiveWindow = min(max(channelReceiveWindow, WireLimits.initialChannelWindow), WireLimits.maxWindow)
        self.connectionReceiveWindow = min(max(connectionReceiveWindow, WireLimits.initialConnectionWindow), WireLimits.maxWindow)
        self.resourceDirectory = resourceDirectory ?? Self.defaultResourceDirectory()
        self.maximumIncomingResourceSize = min(maximumIncomingResourceSize, WireLimits.maxResourceSize)
        self.maximumConcurrentIncomingResources = max(0, maximumConcurrentIncomingResources)
        self.maximumIncomingResourcesPerPeer = max(0, maximumIncomingResourcesPerPeer)
        self.resumableTransfers = max(0, resumableTransfers)
        self.resumeLifetime = resumeLifetime
    }

    static func defaultResourceDirectory() -> String {
        let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        return base + "/swift-multipeer-resources-\(getuid())"
    }

    /// What each link's `ChannelMux` is given.
    var muxLimits: ChannelMux.Limits {
        ChannelMux.Limits(
            channelReceiveWindow: channelReceiveWindow, connectionReceiveWindow: connectionReceiveWindow,
            maximumIncomingResourceSize: maximumIncomingResourceSize, maximumIncomingResourcesPerPeer: maximumIncomingResourcesPerPeer,
            maximumConcurrentIncomingResources: maximumConcurrentIncomingResources)
    }
}
