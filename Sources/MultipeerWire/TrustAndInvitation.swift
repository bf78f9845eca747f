import NIOCore

/// TRUST (docs/PROTOCOL.md §6.4.2).
public enum TrustDecision: UInt8, CaseIterable, Sendable {
    case accepted = 1
    case rejected = 2
    case timedOut = 3
}

/// The answer in INVITATION_RESPONSE (docs/PROTOCOL.md §6.4.4).
public enum InvitationResponse: UInt8, CaseIterable, Sendable {
    case accepted = 1
    case declined = 2
    case timedOut = 3
    /// The session the invitee chose has no room for another member.
    case sessionFull = 4
    /// The session the invitee chose cannot talk to the inviter (encryption preferences, §4).
    case encryptionIncompatible = 5
}

/// INVITATION_RESPONSE (docs/PROTOCOL.md §6.4.4): the answer, and with an acceptance the
/// connection data the inviter dials the invitee's session with (§7.2).
public struct InvitationAnswer: Hashable, Sendable {
    public let response: InvitationResponse
    /// Present exactly when `response` is `accepted`.
    public let connectionData: ConnectionData?

    /// Throws unless the connection data is present exactly for an acceptance.
    public init(_ response: InvitationResponse, connectionData: ConnectionData? = nil) throws(WireError) {
        guard (response == .accepted) == (connectionData != nil) else {
            throw WireError(.invalidValue, "INVITATION_RESPONSE \(response) \(connectionData == nil ? "without" : "with") connection data")
        }
        self.response = response
        self.connectionData = connectionData
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(response.rawValue)
        guard let connectionData else { return }
        let lengthIndex = buffer.writerIndex
        buffer.writeInteger(UInt16(0))
        connectionData.encode(into: &buffer)
        buffer.setInteger(UInt16(buffer.writerIndex - lengthIndex - 2), at: lengthIndex)
    }

    var encodedLength: Int {
        guard let connectionData else { return 1 }
        var scratch = ByteBuffer()
        connectionData.encode(into: &scratch)
        return 3 + scratch.readableBytes
    }

    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> InvitationAnswer {
        let raw = try buffer.readWireInteger(as: UInt8.self, "INVITATION_RESPONSE")
        guard let response = InvitationResponse(rawValue: raw) else { throw WireError(.invalidValue, "INVITATION_RESPONSE \(raw)") }
        guard response == .accepted else { return try InvitationAnswer(response) }
        let length = Int(try buffer.readWireInteger(as: UInt16.self, "INVITATION_RESPONSE connection data length"))
        guard length <= WireLimits.maxConnectionDataLength else {
            throw WireError(.invalidLength, "connection data of \(length) bytes, at most \(WireLimits.maxConnectionDataLength)")
        }
        let data = try ConnectionData.decode(try buffer.readWireSlice(length: length, "INVITATION_RESPONSE connection data"))
        return try InvitationAnswer(.accepted, connectionData: data)
    }
}

/// INVITATION (docs/PROTOCOL.md §6.4.3). The context is the inviting app's, untrusted.
public struct Invitation: Hashable, Sendable {
    public let timeoutMilliseconds: UInt32
    public let context: ByteBuffer

    public init(timeoutMilliseconds: UInt32, context: ByteBuffer) throws(WireError) {
        guard WireLimits.invitationTimeoutMilliseconds.contains(timeoutMilliseconds) else {
            throw WireError(.invalidValue, "invitation timeout \(timeoutMilliseconds) ms")
        }
        guard context.readableBytes <= WireLimits.maxInvitationContext else {
            throw WireError(.invalidLength, "invitation context of \(context.readableBytes) bytes, at most \(WireLimits.maxInvitationContext)")
        }
        self.timeoutMilliseconds = timeoutMilliseconds
        self.context = context
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(timeoutMilliseconds)
        buffer.writeInteger(UInt16(context.readableBytes))
        buffer.writeImmutableBuffer(context)
    }

    var encodedLength: Int { 6 + context.readableBytes }

    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> Invitation {
        let timeout = try buffer.readWireInteger(as: UInt32.self, "INVITATION timeout")
        let length = Int(try buffer.readWireInteger(as: UInt16.self, "INVITATION context length"))
        guard length <= WireLimits.maxInvitationContext else {
            throw WireError(.invalidLength, "invitation context of \(length) bytes, at most \(WireLimits.maxInvitationContext)")
        }
        return try Invitation(timeoutMilliseconds: timeout, context: try buffer.readWireSlice(length: length, "INVITATION context"))
    }
}
