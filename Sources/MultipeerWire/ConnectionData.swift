import NIOCore

/// The blob of `nearbyConnectionData(forPeer:)` / `connectPeer(_:withNearbyConnectionData:)`
/// (docs/PROTOCOL.md §9.3). It arrives from the app, possibly from anywhere: decoding is strict.
public struct ConnectionData: Hashable, Sendable {
    public static let magic: UInt32 = 0x4D50_4344  // "MPCD"
    public static let version: UInt8 = 1
    public static let identityFlag: UInt8 = 0x01
    public static let endpointCounts = 1...WireLimits.maxConnectionDataEndpoints
    /// The longest encoding: a 63-byte display name, a fingerprint and 8 IPv6 endpoints.
    public static let maxEncodedLength =
        8 + 16 + 16 + WirePeerID.maxEncodedLength + 1 + SHA256Digest.byteCount + 1
        + WireLimits.maxConnectionDataEndpoints * WireEndpoint.maxEncodedLength

    public let encryptionPreference: WireEncryptionPreference
    public let token: Bytes16
    /// Identifier of the peer this blob was made for.
    public let forPeer: Bytes16
    /// The maker.
    public let peerID: WirePeerID
    /// SHA-256 of the maker's leaf certificate; present exactly when the maker has an identity.
    public let certificateFingerprint: SHA256Digest?
    public let endpoints: [WireEndpoint]

    public var hasIdentity: Bool { certificateFingerprint != nil }

    public init(
        encryptionPreference: WireEncryptionPreference,
        token: Bytes16,
        forPeer: Bytes16,
        peerID: WirePeerID,
        certificateFingerprint: SHA256Digest?,
        endpoints: [WireEndpoint]
    ) throws(WireError) {
        guard Self.endpointCounts.contains(endpoints.count) else {
            throw WireError(.invalidValue, "connection data with \(endpoints.count) endpoints, allowed 1-\(WireLimits.maxConnectionDataEndpoints)")
        }
        // Port 0 is only for introductions of members that do not listen (§6.4.5).
        guard endpoints.allSatisfy(\.isListening) else { throw WireError(.invalidValue, "connection data endpoint with port 0") }
        self.encryptionPreference = encryptionPreference
        self.token = token
        self.forPeer = forPeer
        self.peerID = peerID
        self.certificateFingerprint = certificateFingerprint
        self.endpoints = endpoints
    }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(Self.magic)
        buffer.writeInteger(Self.version)
        buffer.writeInteger(encryptionPreference.rawValue)
        buffer.writeInteger(hasIdentity ? Self.identityFlag : 0)
        buffer.writeInteger(UInt8(0))
        buffer.writeBytes16(token)
        buffer.writeBytes16(forPeer)
        peerID.encode(into: &buffer)
        if let certificateFingerprint {
            buffer.writeInteger(UInt8(SHA256Digest.byteCount))
            buffer.writeBytes(certificateFingerprint.bytes)
        } else {
            buffer.writeInteger(UInt8(0))
        }
        buffer.writeInteger(UInt8(endpoints.count))
        for endpoint in endpoints { endpoint.encode(into: &buffer) }
    }

    public static func decode(_ bytes: ByteBuffer) throws(WireError) -> ConnectionData {
        guard bytes.readableBytes <= WireLimits.maxConnectionDataLength else {
            throw WireError(.invalidLength, "connection data of \(bytes.readableBytes) bytes, at most \(WireLimits.maxConnectionDataLength)")
        }
        var buffer = bytes
        guard try buffer.readWireInteger(as: UInt32.self, "connection data magic") == magic else {
            throw WireError(.badMagic, "connection data magic is not MPCD")
        }
        let version = try buffer.readWireInteger(as: UInt8.self, "connection data version")
        guard version == Self.version else { throw WireError(.unsupportedVersion, "connection data version \(version)") }
        let rawPreference = try buffer.readWireInteger(as: UInt8.self, "connection data encryptionPreference")
        guard let preference = WireEncryptionPreference(rawValue: rawPreference) else {
            throw WireError(.invalidValue, "encryption preference \(rawPreference)")
        }
        let flags = try buffer.readWireInteger(as: UInt8.self, "connection data flags")
        guard flags & ~identityFlag == 0 else { throw WireError(.nonZeroReserved, "connection data reserved flag bits") }
        try buffer.readWireReservedZero(as: UInt8.self, "connection data reserved")
        let token = try buffer.readWireBytes16("connection data token")
        let forPeer = try buffer.readWireBytes16("connection data forPeer")
        let peerID = try WirePeerID.decode(from: &buffer)

        let fingerprintLength = Int(try buffer.readWireInteger(as: UInt8.self, "fingerprint length"))
        let expectedLength = flags & identityFlag != 0 ? SHA256Digest.byteCount : 0
        guard fingerprintLength == expectedLength else {
            throw WireError(.invalidLength, "fingerprint of \(fingerprintLength) bytes where the identity flag requires \(expectedLength)")
        }
        let fingerprint: SHA256Digest? =
            fingerprintLength == 0
            ? nil : try SHA256Digest(bytes: try buffer.readWireSlice(length: fingerprintLength, "fingerprint").readableBytesView)

        let count = Int(try buffer.readWireInteger(as: UInt8.self, "endpoint count"))
        guard endpointCounts.contains(count) else {
            throw WireError(.invalidValue, "connection data with \(count) endpoints, allowed 1-\(WireLimits.maxConnectionDataEndpoints)")
        }
        var endpoints: [WireEndpoint] = []
        endpoints.reserveCapacity(count)
        for _ in 0..<count { endpoints.append(try WireEndpoint.decode(from: &buffer)) }
        try buffer.requireFullyRead("connection data")
        return try ConnectionData(
            encryptionPreference: preference, token: token, forPeer: forPeer, peerID: peerID,
            certificateFingerprint: fingerprint, endpoints: endpoints
        )
    }
}
