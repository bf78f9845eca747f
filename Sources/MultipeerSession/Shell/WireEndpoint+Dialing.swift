#if canImport(Glibc)
import Glibc
#endif
import MultipeerWire
import NIOCore
import MultipeerProtocol

extension WireEndpoint {
    /// The address to dial. A link-local one needs `linkScope`, the index of the interface of
    /// the link it is on (docs/PROTOCOL.md §9.2); without it this throws and the dialer skips it.
    package func socketAddress(linkScope: UInt32? = nil) throws -> SocketAddress {
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
