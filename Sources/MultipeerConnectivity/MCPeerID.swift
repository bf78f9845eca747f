import Foundation
import MultipeerCrypto
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// A peer in a multipeer session: a display name and a random 128-bit identity.
///
/// Two peer IDs created with the same display name are different peers. To keep one identity
/// across launches, archive the peer ID (NSKeyedArchiver or Codable) and restore it.
///
/// Open, as Apple's: a subclass that declares an initializer of its own also implements the
/// required `init?(coder:)` and, as the class is `Codable` here, `init(from:)`.
open class MCPeerID: NSObject, NSCopying, NSSecureCoding, Codable, @unchecked Sendable {
    // @unchecked: every stored property is an immutable value.
    let wire: WirePeerID
    /// `hash`, fixed at creation (see there).
    private let stableHash: Int

    public var displayName: String { wire.displayName }

    /// Creates a new, unique peer. Like Apple's, this traps on an empty display name or one over
    /// 63 bytes of UTF-8; use `init(validatingDisplayName:)` to get an error instead.
    public init(displayName: String) {
        do {
            wire = try MCPeerID.checked { () throws(WireError) in try WirePeerID(identifier: .random(), displayName: displayName) }
        } catch {
            preconditionFailure("MCPeerID: \(error.reason)")
        }
        stableHash = Self.stableHash(wire.identifier)
        super.init()
    }

    /// Creates a new, unique peer, or throws `MCError.invalidParameter` for a bad display name.
    public init(validatingDisplayName displayName: String) throws(MCError) {
        wire = try MCPeerID.checked { () throws(WireError) in try WirePeerID(identifier: .random(), displayName: displayName) }
        stableHash = Self.stableHash(wire.identifier)
        super.init()
    }

    init(wire: WirePeerID) {
        self.wire = wire
        stableHash = Self.stableHash(wire.identifier)
        super.init()
    }

    /// The compact, versioned encoding peers exchange (docs/PROTOCOL.md §9.1).
    public var wireRepresentation: Data {
        var buffer = ByteBuffer()
        wire.encode(into: &buffer)
        return Data(buffer.readableBytesView)
    }

    /// Decodes `wireRepresentation`; any other bytes are `MCError.invalidParameter`.
    public convenience init(wireRepresentation data: Data) throws(MCError) {
        guard data.count <= WirePeerID.maxEncodedLength else {
            throw MCError(.invalidParameter, reason: "peer ID encoding of \(data.count) bytes is too long")
        }
        let peer = try MCPeerID.checked { () throws(WireError) in try WirePeerID.decode(exactly: ByteBuffer(bytes: data)) }
        self.init(wire: peer)
    }

    private static func checked<T>(_ body: () throws(WireError) -> T) throws(MCError) -> T {
        do {
            return try body()
        } catch {
            throw MCError(.invalidParameter, reason: error.rule)
        }
    }

    // MARK: Identity

    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? MCPeerID else { return false }
        return wire.identifier == other.wire.identifier
    }

    /// The same number in every process, on every machine, for the same peer: apps compare
    /// `myPeerID.hashValue > peerID.hashValue` on both devices to elect a host, so a per-process
    /// seeded hash would give them opposite answers. It is the first 8 bytes of the SHA-256 of
    /// the peer's 16-byte identifier, big-endian, as a signed integer; only the identifier, as
    /// `isEqual` compares only it. SHA-256 rather than the identifier's own bits: a stranger
    /// choosing identifiers cannot cheaply make many of them collide in an app's `Set`.
    open override var hash: Int { stableHash }

    private static func stableHash(_ identifier: Bytes16) -> Int {
        let digest = SHA256Hasher.digest(identifier.bytes)
        let prefix = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(truncatingIfNeeded: Int64(bitPattern: prefix))
    }

    open override var description: String { "<MCPeerID \(displayName) \(wire.identifier)>" }

    /// Peer IDs are immutable, so a copy is the same object.
    open func copy(with zone: NSZone? = nil) -> Any { self }

    // MARK: NSSecureCoding

    open class var supportsSecureCoding: Bool { true }

    private enum ArchiveKey {
        static let identifier = "MCPeerID.identifier"
        static let displayName = "MCPeerID.displayName"
    }

    open func encode(with coder: NSCoder) {
        coder.encode(Data(wire.identifier.bytes) as NSData, forKey: ArchiveKey.identifier)
        coder.encode(wire.displayName as NSString, forKey: ArchiveKey.displayName)
    }

    public required init?(coder: NSCoder) {
        guard
            let identifierData = coder.decodeObject(of: NSData.self, forKey: ArchiveKey.identifier),
            let identifier = Bytes16(bytes: Data(referencing: identifierData)),
            let name = coder.decodeObject(of: NSString.self, forKey: ArchiveKey.displayName),
            let wire = try? WirePeerID(identifier: identifier, displayName: String(name))
        else {
            return nil
        }
        self.wire = wire
        stableHash = Self.stableHash(wire.identifier)
        super.init()
    }

    // MARK: Codable

    private enum CodingKeys: String, CodingKey {
        case identifier, displayName
    }

    open func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(wire.identifier.description, forKey: .identifier)
        try container.encode(wire.displayName, forKey: .displayName)
    }

    public required init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let hex = try container.decode(String.self, forKey: .identifier)
        guard let identifier = Bytes16(hex: hex) else {
            throw DecodingError.dataCorruptedError(forKey: .identifier, in: container, debugDescription: "not 32 hex digits")
        }
        let name = try container.decode(String.self, forKey: .displayName)
        do {
            wire = try WirePeerID(identifier: identifier, displayName: name)
        } catch {
            throw DecodingError.dataCorruptedError(forKey: .displayName, in: container, debugDescription: error.rule)
        }
        stableHash = Self.stableHash(wire.identifier)
        super.init()
    }
}
