import NIOCore

/// An IP address and port as they travel (docs/PROTOCOL.md §9.2).
public struct WireEndpoint: Hashable, Sendable, CustomStringConvertible {
    public enum Address: Hashable, Sendable {
        /// The four bytes in network order.
        case ipv4(UInt32)
        case ipv6(Bytes16)
    }

    public static let maxEncodedLength = 1 + 16 + 2

    public let address: Address
    public let port: UInt16

    public init(address: Address, port: UInt16) throws(WireError) {
        guard port != 0 else { throw WireError(.invalidValue, "endpoint port 0") }
        self.address = address
        self.port = port
    }

    private init(unchecked address: Address, port: UInt16) {
        self.address = address
        self.port = port
    }

    /// A member that accepts no connections, at the address its introducer sees it at: port 0,
    /// allowed only in MESH_INTRODUCTION entries (docs/PROTOCOL.md §6.4.5, §7.4).
    public static func notListening(at address: Address) -> WireEndpoint {
        WireEndpoint(unchecked: address, port: 0)
    }

    /// Whether anything can be dialed here (port 0 only ever comes from `notListening`).
    public var isListening: Bool { port != 0 }

    public var encodedLength: Int {
        switch address {
        case .ipv4: 1 + 4 + 2
        case .ipv6: 1 + 16 + 2
        }
    }

    public func encode(into buffer: inout ByteBuffer) {
        switch address {
        case .ipv4(let value):
            buffer.writeInteger(UInt8(4))
            buffer.writeInteger(value)
        case .ipv6(let value):
            buffer.writeInteger(UInt8(6))
            buffer.writeBytes16(value)
        }
        buffer.writeInteger(port)
    }

    /// `allowingNotListening`: port 0 is valid (MESH_INTRODUCTION entries only).
    public static func decode(from buffer: inout ByteBuffer, allowingNotListening: Bool = false) throws(WireError) -> WireEndpoint {
        let family = try buffer.readWireInteger(as: UInt8.self, "endpoint family")
        let address: Address
        switch family {
        case 4: address = .ipv4(try buffer.readWireInteger("IPv4 address"))
        case 6: address = .ipv6(try buffer.readWireBytes16("IPv6 address"))
        default: throw WireError(.invalidValue, "endpoint family \(family)")
        }
        let port = try buffer.readWireInteger(as: UInt16.self, "endpoint port")
        if port == 0 && allowingNotListening { return .notListening(at: address) }
        return try WireEndpoint(address: address, port: port)
    }

    public var description: String {
        switch address {
        case .ipv4(let value):
            let octets = (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32($0)))) }
            return octets.joined(separator: ".") + ":\(port)"
        case .ipv6(let value):
            let bytes = value.bytes
            let groups = stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            return "[" + groups.joined(separator: ":") + "]:\(port)"
        }
    }
}
