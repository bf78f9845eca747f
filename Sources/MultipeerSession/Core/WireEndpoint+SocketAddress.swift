#if canImport(Glibc)
import Glibc
#endif
import MultipeerWire
import NIOCore

extension WireEndpoint {
    init(socketAddress: SocketAddress) throws(WireError) {
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
    var isLinkLocal: Bool {
        guard case .ipv6(let value) = address else { return false }
        return value.bytes[0] == 0xFE && value.bytes[1] & 0xC0 == 0x80
    }

    /// The address to dial. A link-local one needs `linkScope`, the index of the interface of
    /// the link it is on (docs/PROTOCOL.md §9.2); without it this throws and the dialer skips it.
    func socketAddress(linkScope: UInt32? = nil) throws -> SocketAddress {
        if isLinkLocal && linkScope == nil { throw WireError(.invalidValue, "link-local \(self) without a known link") }
        switch address {
        case .ipv4(let value):
            let octets = (0..<4).map { String(UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32($0)))) }
            return try SocketAddress(ipAddress: octets.joined(separator: "."), port: Int(port))
        case .ipv6(let value):
            var storage = in6_addr()
            withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: value.bytes) }
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(port).bigEndian
            address.sin6_addr = storage
            if isLinkLocal, let linkScope { address.sin6_scope_id = linkScope }
            return SocketAddress(address, host: "")
        }
    }
}
