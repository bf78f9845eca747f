import NIOCore

/// The MCEncryptionPreference values as they travel (Apple's raw values).
public enum WireEncryptionPreference: UInt8, CaseIterable, Sendable {
    case optional = 0
    case required = 1
    case none = 2
}

/// The 8 clear-text bytes each side sends first (docs/PROTOCOL.md §3).
public struct Preamble: Hashable, Sendable {
    public static let magic: UInt32 = 0x4D50_4350  // "MPCP"
    public static let identityFlag: UInt8 = 0x01

    public let minVersion: UInt8
    public let maxVersion: UInt8
    public let encryptionPreference: WireEncryptionPreference
    public let hasIdentity: Bool

    public init(
        minVersion: UInt8 = WireLimits.protocolVersion,
        maxVersion: UInt8 = WireLimits.protocolVersion,
        encryptionPreference: WireEncryptionPreference,
        hasIdentity: Bool
    ) throws(WireError) {
        guard minVersion >= 1, minVersion <= maxVersion else {
            throw WireError(.invalidValue, "preamble version range \(minVersion)-\(maxVersion)")
        }
        self.minVersion = minVersion
        self.maxVersion = maxVersion
        self.encryptionPreference = encryptionPreference
        self.hasIdentity = hasIdentity
    }

    /// The 8 bytes as one big-endian integer: what HELLO echoes.
    public var rawValue: UInt64 {
        UInt64(Self.magic) << 32 | UInt64(minVersion) << 24 | UInt64(maxVersion) << 16
            | UInt64(encryptionPreference.rawValue) << 8 | UInt64(hasIdentity ? Self.identityFlag : 0)
    }

    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(rawValue)
    }

    /// Decodes exactly `WireLimits.preambleLength` bytes.
    public static func decode(_ bytes: ByteBuffer) throws(WireError) -> Preamble {
        guard bytes.readableBytes == WireLimits.preambleLength else {
            throw WireError(.invalidLength, "preamble of \(bytes.readableBytes) bytes, must be \(WireLimits.preambleLength)")
        }
        var buffer = bytes
        guard try buffer.readWireInteger(as: UInt32.self, "preamble magic") == magic else {
            throw WireError(.badMagic, "preamble magic is not MPCP")
        }
        let minVersion = try buffer.readWireInteger(as: UInt8.self, "preamble minVersion")
        let maxVersion = try buffer.readWireInteger(as: UInt8.self, "preamble maxVersion")
        let rawPreference = try buffer.readWireInteger(as: UInt8.self, "preamble encryptionPreference")
        let flags = try buffer.readWireInteger(as: UInt8.self, "preamble flags")
        guard let preference = WireEncryptionPreference(rawValue: rawPreference) else {
            throw WireError(.invalidValue, "encryption preference \(rawPreference)")
        }
        guard flags & ~identityFlag == 0 else { throw WireError(.nonZeroReserved, "preamble reserved flag bits") }
        return try Preamble(
            minVersion: minVersion, maxVersion: maxVersion,
            encryptionPreference: preference, hasIdentity: flags & identityFlag != 0
        )
    }
}
