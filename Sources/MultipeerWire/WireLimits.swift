/// Every number of the wire protocol (docs/PROTOCOL.md §10), in one place.
public enum WireLimits {
    public static let protocolVersion: UInt8 = 1
    /// The highest version this implementation speaks: 2 adds link recovery (§7.9).
    public static let maxProtocolVersion: UInt8 = 2
    public static let preambleLength = 8
    public static let frameHeaderLength = 12
    public static let maxFramePayload = 65_536
    public static let maxMessageSize = 16_777_216

    public static let maxDisplayNameBytes = 63
    public static let maxChannelNameBytes = 255
    public static let maxResourceSize: UInt64 = 1 << 40
    public static let maxInvitationContext = 4_096
    public static let invitationTimeoutMilliseconds: ClosedRange<UInt32> = 1...3_600_000
    public static let maxSessionMembers = 8
    /// Everyone but the introducer and the member being told.
    public static let maxMeshIntroductionEntries = maxSessionMembers - 2

    public static let maxChannelsOpenedPerSide = 64
    public static let initialChannelWindow: UInt32 = 262_144
    public static let initialConnectionWindow: UInt32 = 1_048_576
    public static let maxWindow: UInt32 = 2_147_483_647

    public static let maxConnectionDataLength = 512
    public static let maxConnectionDataEndpoints = 8
    public static let connectionTokenLifetimeSeconds = 120
    public static let meshIntroductionLifetimeSeconds = 60

    public static let datagramHeaderLength = 20
    public static let datagramTagLength = 16
    public static let maxUDPPayload = 65_507
    public static let maxSealedDatagramMessage = maxUDPPayload - datagramHeaderLength - datagramTagLength
    public static let maxPlainDatagramMessage = maxUDPPayload - datagramHeaderLength
    public static let minimumReplayWindow = 2_048
    /// Senders move to the next epoch before a counter reaches this.
    public static let datagramEpochCounterLimit: UInt64 = 1 << 32

    public static let tlsRecordsPerKeyUpdate: UInt64 = 1 << 24
    public static let defaultHandshakeDeadlineSeconds = 10
    public static let defaultKeepaliveIntervalSeconds = 2
    public static let defaultDeadPeerDeadlineSeconds = 9
    public static let alpnProtocol = "mpcp/1"
}
