import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
import MultipeerProtocol
#endif

/// One mDNS socket: UDP port 5353 of one interface and one address family (shared with other
/// mDNS stacks through address and port reuse), joined to the mDNS group on that interface only,
/// sending there only, its own multicasts looped back (other stacks on the host hear them).
enum MDNSSocket {
    /// Where a socket listens: an interface and a family.
    struct Key: Hashable {
        let interfaceIndex: Int
        let ipv6: Bool
    }

    static let ipv4Group = try! SocketAddress(ipAddress: "224.0.0.251", port: Int(MDNS.port))
    static let ipv6Group = try! SocketAddress(ipAddress: "ff02::fb", port: Int(MDNS.port))

    static func group(ipv6: Bool) -> SocketAddress { ipv6 ? ipv6Group : ipv4Group }

    /// Opens the socket with `handler` first in its pipeline.
    static func open(
        on interface: MDNSInterface, ipv6: Bool, eventLoop: any EventLoop, handler: @escaping @Sendable () -> any ChannelHandler
    ) -> EventLoopFuture<any Channel> {
        var bootstrap = DatagramBootstrap(group: eventLoop)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.socketOption(.init(rawValue: SO_REUSEPORT)), value: 1)
            // Room for the largest mDNS message (RFC 6762 §17), so none is cut short.
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 9_000))
            // The arrival interface and destination: the on-link check (RFC 6762 §11) needs both, and a unicast
            // reaches whichever of our sockets the kernel picks.
            .channelOption(.receivePacketInfo, value: true)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(handler()) }
            }
        if ipv6 {
            bootstrap = bootstrap
                // IPv6 only: a dual-stack socket would take IPv4 packets as mapped addresses too.
                // (The kernel matches IPv6 memberships by group alone, not by interface: every one
                // of our IPv6 sockets gets each packet, and the arrival interface tells them apart.)
                .channelOption(ChannelOptions.Types.SocketOption(level: .init(rawValue: Int32(IPPROTO_IPV6)), name: .init(rawValue: IPV6_V6ONLY)), value: 1)
        }
        return bootstrap.bind(host: ipv6 ? "::" : "0.0.0.0", port: Int(MDNS.port)).flatMap { channel in
            let configured = ipv6 ? configureIPv6(channel, interface) : configureIPv4(channel, interface)
            return configured.map { channel }.flatMapErrorThrowing { error in
                channel.close(promise: nil)
                throw error
            }
        }
    }

    private static func configureIPv4(_ channel: any Channel, _ interface: MDNSInterface) -> EventLoopFuture<Void> {
        guard case .ipv4(let own)? = interface.addresses.first(where: { !$0.isIPv6 }) else {
            return channel.eventLoop.makeFailedFuture(DiscoveryError(.noInterface, "\(interface.name) has no IPv4 address"))
        }
        let options = channel as! any SocketOptionProvider
        // Only this socket's own memberships: packets that arrived on other interfaces stay out.
        let multicastAll = ChannelOptions.Types.SocketOption(level: .init(rawValue: Int32(IPPROTO_IP)), name: .init(rawValue: 49))  // IP_MULTICAST_ALL
        let device = (try? System.enumerateDevices())?.first { $0.name == interface.name && $0.address?.protocol == .inet }
        return channel.setOption(multicastAll, value: 0)
            .flatMap { options.setIPMulticastIF(in_addr(s_addr: own.bigEndian)) }
            .flatMap { options.setIPMulticastTTL(255) }
            .flatMap { options.setIPMulticastLoop(1) }
            .flatMap { (channel as! any MulticastChannel).joinGroup(ipv4Group, device: device) }
    }

    private static func configureIPv6(_ channel: any Channel, _ interface: MDNSInterface) -> EventLoopFuture<Void> {
        let options = channel as! any SocketOptionProvider
        let multicastAll = ChannelOptions.Types.SocketOption(level: .init(rawValue: Int32(IPPROTO_IPV6)), name: .init(rawValue: IPV6_MULTICAST_ALL))
        guard case .v6(let group) = ipv6Group else { preconditionFailure("ff02::fb is IPv6") }
        let membership = ipv6_mreq(ipv6mr_multiaddr: group.address.sin6_addr, ipv6mr_interface: UInt32(interface.index))
        return channel.setOption(multicastAll, value: 0)
            .flatMap { options.setIPv6MulticastIF(CUnsignedInt(interface.index)) }
            .flatMap { options.setIPv6MulticastHops(255) }
            .flatMap { options.setIPv6MulticastLoop(1) }
            .flatMap {
                options.unsafeSetSocketOption(level: .init(rawValue: Int32(IPPROTO_IPV6)), name: .init(rawValue: IPV6_JOIN_GROUP), value: membership)
            }
    }
}
