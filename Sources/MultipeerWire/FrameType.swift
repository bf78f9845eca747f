/// Frame types and the per-type header rules of docs/PROTOCOL.md §6.3.
public enum FrameType: UInt8, CaseIterable, Sendable {
    case hello = 0x01
    case trust = 0x02
    case invitation = 0x03
    case invitationResponse = 0x04
    case meshIntroduction = 0x05
    case goodbye = 0x06
    case ping = 0x07
    case pong = 0x08
    case pairingCommit = 0x09
    case pairingNonce = 0x0A
    /// Version 2 (docs/PROTOCOL.md §7.9).
    case resume = 0x0B
    case acknowledge = 0x0C
    case message = 0x10
    case streamOpen = 0x20
    case streamData = 0x21
    case streamClose = 0x22
    case streamReset = 0x23
    case windowUpdate = 0x24
    /// Version 2 (docs/PROTOCOL.md §7.10).
    case streamResume = 0x25
    case streamAcknowledge = 0x26
    case resourceOffer = 0x30
    case resourceChunk = 0x31
    case resourceComplete = 0x32
    case resourceCancel = 0x33
    case resourceAccept = 0x34
    case resourceReceived = 0x35

    public enum ChannelRule: Sendable {
        case connection, channel, any

        func allows(_ channel: UInt32) -> Bool {
            switch self {
            case .connection: channel == 0
            case .channel: channel != 0
            case .any: true
            }
        }
    }

    public var channelRule: ChannelRule {
        switch self {
        case .hello, .trust, .invitation, .invitationResponse, .meshIntroduction, .goodbye, .ping, .pong, .message,
            .pairingCommit, .pairingNonce, .resume, .acknowledge:
            .connection
        case .streamOpen, .streamData, .streamClose, .streamReset, .streamResume, .streamAcknowledge, .resourceOffer, .resourceChunk,
            .resourceComplete, .resourceCancel, .resourceAccept, .resourceReceived:
            .channel
        case .windowUpdate:
            .any
        }
    }

    /// The first protocol version that has this frame type; a connection of an earlier version
    /// treats it as a violation.
    public var sinceVersion: UInt8 {
        switch self {
        case .resume, .acknowledge, .streamResume, .streamAcknowledge: 2
        default: 1
        }
    }

    /// Stream, resource and window frames: the channel layer's (docs/PROTOCOL.md §7.6).
    public var isChannelFrame: Bool { channelRule != .connection }

    public var allowedFlags: UInt8 {
        switch self {
        case .message: FrameFlags.endOfMessage
        case .streamAcknowledge: FrameFlags.streamClosed
        case .resourceOffer: FrameFlags.resourceResumed | FrameFlags.resourceSendID
        default: 0
        }
    }

    /// Payload length bounds, checked from the header before the payload is buffered.
    public var payloadLengths: ClosedRange<Int> {
        switch self {
        case .hello: Hello.fixedLength + 19...Hello.fixedLength + WirePeerID.maxEncodedLength
        case .trust: 1...1
        case .invitationResponse: 1...3 + ConnectionData.maxEncodedLength
        case .invitation: 6...6 + WireLimits.maxInvitationContext
        case .meshIntroduction: MeshIntroduction.minEncodedLength...MeshIntroduction.maxEncodedLength
        case .goodbye, .streamReset, .resourceCancel: 2...2
        case .ping, .pong, .resourceAccept, .acknowledge, .streamAcknowledge: 8...8
        case .streamResume: 5...5 + WireLimits.maxChannelNameBytes
        case .resume: ResumeProof.encodedLength...ResumeProof.encodedLength
        case .message: 0...WireLimits.maxFramePayload
        case .streamOpen: 1...1 + WireLimits.maxChannelNameBytes
        case .streamData, .resourceChunk: 1...WireLimits.maxFramePayload
        case .streamClose, .resourceReceived: 0...0
        case .windowUpdate: 4...4
        case .resourceOffer: ResourceOffer.fixedLength...ResourceOffer.fixedLength + WireLimits.maxChannelNameBytes + ResourceOffer.sendIDLength
        case .resourceComplete, .pairingCommit, .pairingNonce: 32...32
        }
    }
}

public enum FrameFlags {
    /// MESSAGE: this fragment ends the message.
    public static let endOfMessage: UInt8 = 0x01
    /// STREAM_ACK: the receiver has read the stream's end (docs/PROTOCOL.md §6.4.13b).
    public static let streamClosed: UInt8 = 0x01
    /// RESOURCE_OFFER: the offer continues a transfer of an earlier connection (§6.4.14).
    public static let resourceResumed: UInt8 = 0x01
    /// RESOURCE_OFFER: the payload ends with the send's ID (§6.4.14; link recovery only).
    public static let resourceSendID: UInt8 = 0x02
}
