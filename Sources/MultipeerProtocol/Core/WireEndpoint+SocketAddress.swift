import MultipeerWire
import NIOCore

extension WireEndpoint {
    package init(socketAddress: SocketAddress) throws(WireError) {
        guard let port = socketAddress.port, let port16 = UInt16(exactly: port) else {
            throw WireError(.invalidValue, "socket address without a port")
        }
        switch socketAddress {
        case .v4(let address):
            try self.init(address: .ipv4(UInt32(bigEndian: address.address.sin_addr.s_addr)), port: port16)
        case .v6(let address):
            let bytes = withUnsafeBytes(of: address.address.sin6_addr) { Array($0) }
            try self.init(address: .ipv6(Bytes16(bytes: bytes)!), port: port16)
        case .unixDomainSocket:
            throw WireError(.invalidValue, "unix domain sockets have no IP endpoint")
        }
    }

    /// Whether the address is IPv6 link-local (fe80::/10), which names no link by itself.
    package var isLinkLocal: Bool {
        guard case .ipv6(let value) = address else { return false }
        return value.bytes[0] == 0xFE && value.bytes[1] & 0xC0 == 0x80
    }
}
