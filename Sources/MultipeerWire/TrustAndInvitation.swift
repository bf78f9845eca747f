import NIOCore

/// TRUST (docs/PROTOCOL.md §6.4.2).
public enum TrustDecision: UInt8, CaseIterable, Sendable {
    case accepted = 1
    case rejected = 2
    case timedOut = 3
}

/// INVITATION_RESPONSE (docs/PROTOCOL.md §6.4.4).
public enum InvitationResponse: UInt8, CaseIterable, Sendable {
    case accepted = 1
    case declined = 2
    case timedOut = 3
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
