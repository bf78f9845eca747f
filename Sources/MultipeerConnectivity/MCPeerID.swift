import Foundation
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// A peer in a multipeer session: a display name and a random 128-bit identity.
///
/// Two peer IDs created with the same display name are different peers. To keep one identity
/// across launches, archive the peer ID (NSKeyedArchiver or Codable) and restore it.
public final class MCPeerID: NSObject, NSCopying, NSSecureCoding, Codable, @unchecked Sendable {
    // @unchecked: every stored property is an immutable value.
    let wire: WirePeerID

    public var displayName: String { wire.displayName }

    /// Creates a new, unique peer. Like Apple's, this traps on an empty display name or one over
    /// 63 bytes of UTF-8; use `init(validatingDisplayName:)` to get an error instead.
    public convenience init(displayName: String) {
        do {
            try self.init(validatingDisplayName: displayName)
        } catch {
            preconditionFailure("MCPeerID: \(error.reason)")
        }
    }

    /// Creates a new, unique peer, or throws `MCError.invalidParameter` for a bad display name.
    public init(validatingDisplayName displayName: String) throws(MCError) {
        wire = try MCPeerID.checked { () throws(WireError) in try WirePeerID(identifier: .random(), displayName: displayName) }
        super.init()
    }

    init(wire: WirePeerID) {
        self.wire = wire
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

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? MCPeerID else { return false }
        return wire.identifier == other.wire.identifier
    }

    public override var hash: Int { wire.identifier.hashValue }

    public override var description: String { "<MCPeerID \(displayName) \(wire.identifier)>" }

    /// Peer IDs are immutable, so a copy is the same object.
    public func copy(with zone: NSZone? = nil) -> Any { self }

    // MARK: NSSecureCoding

    public static var supportsSecureCoding: Bool { true }

    private enum ArchiveKey {
        static let identifier = "MCPeerID.identifier"
        static let displayName = "MCPeerID.displayName"
    }

    public func encode(with coder: NSCoder) {
        coder.encode(Data(wire.identifier.bytes) as NSData, forKey: ArchiveKey.identifier)
        coder.encode(wire.displayName as NSString, forKey: ArchiveKey.displayName)
    }

    public init?(coder: NSCoder) {
        guard
            let identifierData = coder.decodeObject(of: NSData.self, forKey: ArchiveKey.identifier),
            let identifier = Bytes16(bytes: Data(referencing: identifierData)),
            let name = coder.decodeObject(of: NSString.self, forKey: ArchiveKey.displayName),
            let wire = try? WirePeerID(identifier: identifier, displayName: String(name))
        else {
            return nil
        }
        self.wire = wire
        super.init()
    }

    // MARK: Codable

    private enum CodingKeys: String, CodingKey {
        case identifier, displayName
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(wire.identifier.description, forKey: .identifier)
        try container.encode(wire.displayName, forKey: .displayName)
    }

    public init(from decoder: any Decoder) throws {
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
        super.init()
    }
}
