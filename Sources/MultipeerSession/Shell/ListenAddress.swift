import NIOCore
import MultipeerProtocol

extension SocketAddress {
    /// Where a listener binds: an IP literal as it is, anything else through the resolver. A
    /// literal must not go through getaddrinfo, whose AI_ADDRCONFIG refuses "::" on a host
    /// without a routable IPv6 address, though a dual-stack socket there still takes IPv4.
    package static func listening(on host: String, port: Int = 0) throws -> SocketAddress {
        if let literal = try? SocketAddress(ipAddress: host, port: port) { return literal }
        return try SocketAddress.makeAddressResolvingHost(host, port: port)
    }
}
