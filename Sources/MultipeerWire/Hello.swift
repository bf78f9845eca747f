import NIOCore

/// HELLO (docs/PROTOCOL.md §6.4.1): who the sender is, why it connected, and both preambles again.
public struct Hello: Hashable, Sendable {
    public enum Purpose: UInt8, CaseIterable, Sendable {
        case answer = 0
        case connectionData = 1
        case invitation = 2
        case meshIntroduction = 3
        /// Version 2: resuming a suspended member (docs/PROTOCOL.md §7.9).
        case resumption = 4

        var carriesToken: Bool { self == .connectionData || self == .meshIntroduction || self == .resumption }

        /// The first protocol version that has this purpose.
        public var sinceVersion: UInt8 { self == .resumption ? 2 : 1 }
    }

    /// Bytes before the peer ID.
    public static let fixedLength = 44

    public let version: UInt8
    public let purpose: Purpose
    /// Dialer's preamble in `high`, listener's in `low`, as the sender saw them.
    public let preambleEcho: Bytes16
    public let token: Bytes16
    public let listenPort: UInt16
    public let datagramPort: UInt16
    public let datagramReceiverID: UInt32
    public let peerID: WirePeerID

    public init(
        version: UInt8 = WireLimits.protocolVersion,
        purpose: Purpose,
        preambleEcho: Bytes16,
        token: Bytes16 = .zero,
        listenPort: UInt16,
        datagramPort: UInt16,
        datagramReceiverID: UInt32,
        peerID: WirePeerID
    ) throws(WireError) {
        guard purpose.carriesToken || token.isZero else {
            throw WireError(.invalidValue, "HELLO purpose \(purpose) with a non-zero token")
        }
        guard (datagramPort == 0) == (datagramReceiverID == 0) else {
            throw WireError(.invalidValue, "HELLO datagram port and receiver ID must be both zero or both set")
        }
        self.version = version
        self.purpose = purpose
        self.preambleEcho = preambleEcho
        self.token = token
        self.listenPort = listenPort
        self.datagramPort = datagramPort
        self.datagramReceiverID = datagramReceiverID
        self.peerID = peerID
    }

    public static func echo(dialer: Preamble, listener: Preamble) -> Bytes16 {
        Bytes16(high: dialer.rawValue, low: listener.rawValue)
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(version)
        buffer.writeInteger(purpose.rawValue)
        buffer.writeInteger(UInt16(0))
        buffer.writeBytes16(preambleEcho)
        buffer.writeBytes16(token)
        buffer.writeInteger(listenPort)
        buffer.writeInteger(datagramPort)
        buffer.writeInteger(datagramReceiverID)
        peerID.encode(into: &buffer)
    }

    var encodedLength: Int { Self.fixedLength + peerID.encodedLength }

    static func decode(from buffer: inout ByteBuffer) throws(WireError) -> Hello {
        let version = try buffer.readWireInteger(as: UInt8.self, "HELLO version")
        let rawPurpose = try buffer.readWireInteger(as: UInt8.self, "HELLO purpose")
        try buffer.readWireReservedZero(as: UInt16.self, "HELLO reserved")
        guard let purpose = Purpose(rawValue: rawPurpose) else {
            throw WireError(.invalidValue, "HELLO purpose \(rawPurpose)")
        }
        return try Hello(
            version: version,
            purpose: purpose,
            preambleEcho: try buffer.readWireBytes16("HELLO preambleEcho"),
            token: try buffer.readWireBytes16("HELLO token"),
            listenPort: try buffer.readWireInteger("HELLO listenPort"),
            datagramPort: try buffer.readWireInteger("HELLO datagramPort"),
            datagramReceiverID: try buffer.readWireInteger("HELLO datagramReceiverID"),
            peerID: try WirePeerID.decode(from: &buffer)
        )
    }
}
