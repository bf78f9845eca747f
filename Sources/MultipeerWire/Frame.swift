import NIOCore

/// One frame of docs/PROTOCOL.md §6, decoded and validated.
///
/// Data-carrying cases hold a `ByteBuffer` slice of the received bytes: decoding copies no payload.
public enum Frame: Hashable, Sendable {
    case hello(Hello)
    case trust(TrustDecision)
    case invitation(Invitation)
    case invitationResponse(InvitationAnswer)
    case meshIntroduction(MeshIntroduction)
    case goodbye(GoodbyeReason)
    case ping(UInt64)
    case pong(UInt64)
    /// The dialer's commitment to its pairing nonce (docs/PROTOCOL.md §7.3).
    case pairingCommit(SHA256Digest)
    case pairingNonce(PairingNonce)
    /// Version 2: the first frame after HELLO on a resumption connection (docs/PROTOCOL.md §7.9).
    case resume(ResumeProof)
    /// Version 2: how many of the peer's reliable messages the sender has delivered (§7.9).
    case acknowledge(delivered: UInt64)
    case message(ByteBuffer, isEnd: Bool)
    case streamOpen(channel: UInt32, name: String)
    case streamData(channel: UInt32, ByteBuffer)
    case streamClose(channel: UInt32)
    case streamReset(channel: UInt32, code: StreamResetCode)
    case windowUpdate(channel: UInt32, increment: UInt32)
    /// Version 2 (docs/PROTOCOL.md §7.10): a stream continued by its ordinal on a resumed connection.
    case streamResume(channel: UInt32, ordinal: UInt32, name: String)
    /// Version 2: how many of the stream's bytes the receiver has received in the session; `closed`
    /// once it has read the stream's end.
    case streamAcknowledge(channel: UInt32, received: UInt64, closed: Bool)
    case resourceOffer(channel: UInt32, ResourceOffer)
    case resourceChunk(channel: UInt32, ByteBuffer)
    case resourceComplete(channel: UInt32, sha256: SHA256Digest)
    case resourceCancel(channel: UInt32, reason: ResourceCancelReason)
    case resourceAccept(channel: UInt32, offset: UInt64)
    case resourceReceived(channel: UInt32)

    public var type: FrameType {
        switch self {
        case .hello: .hello
        case .trust: .trust
        case .invitation: .invitation
        case .invitationResponse: .invitationResponse
        case .meshIntroduction: .meshIntroduction
        case .goodbye: .goodbye
        case .ping: .ping
        case .pong: .pong
        case .pairingCommit: .pairingCommit
        case .pairingNonce: .pairingNonce
        case .resume: .resume
        case .acknowledge: .acknowledge
        case .message: .message
        case .streamOpen: .streamOpen
        case .streamData: .streamData
        case .streamClose: .streamClose
        case .streamReset: .streamReset
        case .windowUpdate: .windowUpdate
        case .streamResume: .streamResume
        case .streamAcknowledge: .streamAcknowledge
        case .resourceOffer: .resourceOffer
        case .resourceChunk: .resourceChunk
        case .resourceComplete: .resourceComplete
        case .resourceCancel: .resourceCancel
        case .resourceAccept: .resourceAccept
        case .resourceReceived: .resourceReceived
        }
    }

    public var channel: UInt32 {
        switch self {
        case .hello, .trust, .invitation, .invitationResponse, .meshIntroduction, .goodbye, .ping, .pong, .message, .resume, .acknowledge,
            .pairingCommit, .pairingNonce:
            0
        case .streamOpen(let channel, _), .streamData(let channel, _), .streamClose(let channel),
            .streamReset(let channel, _), .windowUpdate(let channel, _), .resourceOffer(let channel, _),
            .resourceChunk(let channel, _), .resourceComplete(let channel, _), .resourceCancel(let channel, _),
            .resourceAccept(let channel, _), .resourceReceived(let channel), .streamResume(let channel, _, _),
            .streamAcknowledge(let channel, _, _):
            channel
        }
    }

    var flags: UInt8 {
        switch self {
        case .message(_, isEnd: true): FrameFlags.endOfMessage
        case .streamAcknowledge(_, _, closed: true): FrameFlags.streamClosed
        case .resourceOffer(_, let offer): offer.flags
        default: 0
        }
    }

    /// Bytes of payload the frame's encoding carries.
    public var payloadLength: Int {
        switch self {
        case .hello(let hello): hello.encodedLength
        case .trust: 1
        case .invitationResponse(let answer): answer.encodedLength
        case .invitation(let invitation): invitation.encodedLength
        case .meshIntroduction(let introduction): introduction.encodedLength
        case .goodbye, .streamReset, .resourceCancel: 2
        case .ping, .pong, .resourceAccept, .acknowledge, .streamAcknowledge: 8
        case .streamResume(_, _, let name): 5 + name.utf8.count
        case .resume: ResumeProof.encodedLength
        case .message(let payload, _), .streamData(_, let payload), .resourceChunk(_, let payload): payload.readableBytes
        case .streamOpen(_, let name): 1 + name.utf8.count
        case .streamClose, .resourceReceived: 0
        case .windowUpdate: 4
        case .resourceOffer(_, let offer): offer.encodedLength
        case .resourceComplete, .pairingCommit, .pairingNonce: SHA256Digest.byteCount
        }
    }

    /// Appends the frame's bytes. Throws, and writes nothing, if the frame breaks a rule that its
    /// payload types could not check on their own (channel kind, payload length, window increment).
    public func encode(into buffer: inout ByteBuffer) throws(WireError) {
        if let bulk = try encodeHead(into: &buffer, reservingBulk: true) { buffer.writeImmutableBuffer(bulk) }
    }

    /// Encodes the frame but for a bulk payload (MESSAGE, STREAM_DATA, RESOURCE_CHUNK), which
    /// it returns instead, so the caller can send it after the head without copying it.
    public func encodeHead(into buffer: inout ByteBuffer) throws(WireError) -> ByteBuffer? {
        try encodeHead(into: &buffer, reservingBulk: false)
    }

    private func encodeHead(into buffer: inout ByteBuffer, reservingBulk: Bool) throws(WireError) -> ByteBuffer? {
        let header = FrameHeader(type: type, flags: flags, channel: channel, payloadLength: payloadLength)
        try Self.validate(header)
        if case .streamOpen(_, let name) = self {
            try checkString8(name, "stream name", allowed: 0...WireLimits.maxChannelNameBytes)
        }
        if case .streamResume(_, _, let name) = self {
            try checkString8(name, "stream name", allowed: 0...WireLimits.maxChannelNameBytes)
        }
        if case .windowUpdate(_, let increment) = self {
            try Self.checkIncrement(increment)
        }
        let bulk: ByteBuffer? = switch self {
        case .message(let payload, _), .streamData(_, let payload), .resourceChunk(_, let payload): payload
        default: nil
        }
        let headLength = WireLimits.frameHeaderLength + header.payloadLength - (reservingBulk ? 0 : bulk?.readableBytes ?? 0)
        buffer.reserveCapacity(minimumWritableBytes: headLength)
        header.encode(into: &buffer)
        switch self {
        case .hello(let hello): hello.encode(into: &buffer)
        case .trust(let decision): buffer.writeInteger(decision.rawValue)
        case .invitation(let invitation): invitation.encode(into: &buffer)
        case .invitationResponse(let answer): answer.encode(into: &buffer)
        case .meshIntroduction(let introduction): introduction.encode(into: &buffer)
        case .goodbye(let reason): buffer.writeInteger(reason.rawValue)
        case .ping(let opaque), .pong(let opaque): buffer.writeInteger(opaque)
        case .pairingCommit(let digest): buffer.writeBytes(digest.bytes)
        case .pairingNonce(let nonce): buffer.writeBytes(nonce.bytes)
        case .resume(let resume):
            buffer.writeBytes(resume.proof)
            buffer.writeInteger(resume.delivered)
        case .acknowledge(let delivered): buffer.writeInteger(delivered)
        case .message, .streamData, .resourceChunk: break  // the bulk payload goes last
        case .streamOpen(_, let name): buffer.writeString8(name)
        case .streamResume(_, let ordinal, let name):
            buffer.writeInteger(ordinal)
            buffer.writeString8(name)
        case .streamAcknowledge(_, let received, _): buffer.writeInteger(received)
        case .streamClose: break
        case .streamReset(_, let code): buffer.writeInteger(code.rawValue)
        case .windowUpdate(_, let increment): buffer.writeInteger(increment)
        case .resourceOffer(_, let offer): offer.encode(into: &buffer)
        case .resourceComplete(_, let digest): buffer.writeBytes(digest.bytes)
        case .resourceCancel(_, let reason): buffer.writeInteger(reason.rawValue)
        case .resourceAccept(_, let offset): buffer.writeInteger(offset)
        case .resourceReceived: break
        }
        return bulk
    }

    /// The same header rules the decoder applies, so the encoder cannot emit a frame it would refuse.
    private static func validate(_ header: FrameHeader) throws(WireError) {
        guard header.type.channelRule.allows(header.channel) else {
            throw WireError(.invalidChannel, "\(header.type) frame on channel \(header.channel)")
        }
        let bounds = header.type.payloadLengths
        guard bounds.contains(header.payloadLength) else {
            throw WireError(.invalidLength, "\(header.type) payload of \(header.payloadLength) bytes, allowed \(bounds.lowerBound)-\(bounds.upperBound)")
        }
    }

    private static func checkIncrement(_ increment: UInt32) throws(WireError) {
        guard increment >= 1, increment <= WireLimits.maxWindow else {
            throw WireError(.invalidValue, "WINDOW_UPDATE increment \(increment)")
        }
    }

    /// Decodes the payload of a frame whose header has already been validated.
    static func decode(header: FrameHeader, payload: inout ByteBuffer) throws(WireError) -> Frame {
        let channel = header.channel
        let frame: Frame
        switch header.type {
        case .hello:
            frame = .hello(try Hello.decode(from: &payload))
        case .trust:
            let raw = try payload.readWireInteger(as: UInt8.self, "TRUST decision")
            guard let decision = TrustDecision(rawValue: raw) else { throw WireError(.invalidValue, "TRUST decision \(raw)") }
            frame = .trust(decision)
        case .invitation:
            frame = .invitation(try Invitation.decode(from: &payload))
        case .invitationResponse:
            frame = .invitationResponse(try InvitationAnswer.decode(from: &payload))
        case .meshIntroduction:
            frame = .meshIntroduction(try MeshIntroduction.decode(from: &payload))
        case .goodbye:
            frame = .goodbye(GoodbyeReason(rawValue: try payload.readWireInteger("GOODBYE reason")))
        case .ping:
            frame = .ping(try payload.readWireInteger("PING opaque"))
        case .pong:
            frame = .pong(try payload.readWireInteger("PONG opaque"))
        case .pairingCommit:
            let bytes = try payload.readWireSlice(length: SHA256Digest.byteCount, "PAIRING_COMMIT")
            frame = .pairingCommit(try SHA256Digest(bytes: bytes.readableBytesView))
        case .pairingNonce:
            let bytes = try payload.readWireSlice(length: PairingNonce.byteCount, "PAIRING_NONCE")
            frame = .pairingNonce(try PairingNonce(bytes: bytes.readableBytesView))
        case .resume:
            let proof = try payload.readWireSlice(length: ResumeProof.proofLength, "RESUME proof")
            frame = .resume(try ResumeProof(proof: proof.readableBytesView, delivered: try payload.readWireInteger("RESUME delivered")))
        case .acknowledge:
            frame = .acknowledge(delivered: try payload.readWireInteger("ACK delivered"))
        case .message:
            frame = .message(payload.readSlice(length: payload.readableBytes)!, isEnd: header.flags & FrameFlags.endOfMessage != 0)
        case .streamOpen:
            frame = .streamOpen(channel: channel, name: try payload.readWireString8("stream name", allowed: 0...WireLimits.maxChannelNameBytes))
        case .streamResume:
            let ordinal = try payload.readWireInteger(as: UInt32.self, "STREAM_RESUME ordinal")
            frame = .streamResume(
                channel: channel, ordinal: ordinal, name: try payload.readWireString8("stream name", allowed: 0...WireLimits.maxChannelNameBytes))
        case .streamAcknowledge:
            frame = .streamAcknowledge(
                channel: channel, received: try payload.readWireInteger("STREAM_ACK received"),
                closed: header.flags & FrameFlags.streamClosed != 0)
        case .streamData:
            frame = .streamData(channel: channel, payload.readSlice(length: payload.readableBytes)!)
        case .streamClose:
            frame = .streamClose(channel: channel)
        case .streamReset:
            frame = .streamReset(channel: channel, code: StreamResetCode(rawValue: try payload.readWireInteger("STREAM_RESET code")))
        case .windowUpdate:
            let increment = try payload.readWireInteger(as: UInt32.self, "WINDOW_UPDATE increment")
            try checkIncrement(increment)
            frame = .windowUpdate(channel: channel, increment: increment)
        case .resourceOffer:
            frame = .resourceOffer(
                channel: channel,
                try ResourceOffer.decode(
                    from: &payload, resumed: header.flags & FrameFlags.resourceResumed != 0,
                    hasSendID: header.flags & FrameFlags.resourceSendID != 0))
        case .resourceChunk:
            frame = .resourceChunk(channel: channel, payload.readSlice(length: payload.readableBytes)!)
        case .resourceComplete:
            let digest = try payload.readWireSlice(length: SHA256Digest.byteCount, "RESOURCE_COMPLETE digest")
            frame = .resourceComplete(channel: channel, sha256: try SHA256Digest(bytes: digest.readableBytesView))
        case .resourceCancel:
            frame = .resourceCancel(channel: channel, reason: ResourceCancelReason(rawValue: try payload.readWireInteger("RESOURCE_CANCEL reason")))
        case .resourceAccept:
            frame = .resourceAccept(channel: channel, offset: try payload.readWireInteger("RESOURCE_ACCEPT offset"))
        case .resourceReceived:
            frame = .resourceReceived(channel: channel)
        }
        try payload.requireFullyRead("\(header.type) payload")
        return frame
    }
}
