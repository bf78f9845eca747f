import NIOCore

#if canImport(Glibc)
import Glibc
import MultipeerProtocol
#endif

/// The machine's interfaces as discovery sees them.
public enum MDNSInterfaces {
    /// How often either engine lists the interfaces again while running.
    static var checkInterval: TimeAmount { .seconds(2) }

    /// Up, multicast-capable interfaces with an address. `names` picks them by name (for example
    /// `["lo"]` inside a test's network namespace); nil takes every one but loopback.
    public static func current(names: [String]? = nil) throws(DiscoveryError) -> [MDNSInterface] {
        let devices: [NIONetworkDevice]
        do {
            devices = try System.enumerateDevices()
        } catch {
            throw DiscoveryError(.noInterface, "cannot list network interfaces: \(error)")
        }
        var byName: [String: MDNSInterface] = [:]
        for device in devices where device.multicastSupported {
            if let names {
                guard names.contains(device.name) else { continue }
            } else if device.name == "lo" || device.address.map(isLoopback) == true {
                continue
            }
            guard let address = device.address.flatMap(mdnsAddress) else { continue }
            var interface = byName[device.name] ?? MDNSInterface(index: device.interfaceIndex, name: device.name, addresses: [], subnets: [])
            if !interface.addresses.contains(address) { interface.addresses.append(address) }
            // The link's subnets, for RFC 6762 §11: the address with its netmask, and a
            // point-to-point link's other end.
            var subnets = [MDNSSubnet(address: address, netmask: device.netmask.flatMap(mdnsAddress))]
            if let peer = device.pointToPointDestinationAddress.flatMap(mdnsAddress) { subnets.append(MDNSSubnet(address: peer, netmask: nil)) }
            for subnet in subnets where !interface.subnets.contains(subnet) { interface.subnets.append(subnet) }
            byName[device.name] = interface
        }
        return byName.values.sorted { $0.index < $1.index }
    }

    static func mdnsAddress(_ address: SocketAddress) -> MDNSAddress? {
        switch address {
        case .v4(let v4): return .ipv4(UInt32(bigEndian: v4.address.sin_addr.s_addr))
        case .v6(let v6): return .ipv6(withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        case .unixDomainSocket: return nil
        }
    }

    private static func isLoopback(_ address: SocketAddress) -> Bool {
        address.ipAddress == "127.0.0.1" || address.ipAddress == "::1"
    }

    /// The socket address to send to; an IPv6 one carries the interface as its scope, which a
    /// link-local address needs (and any other ignores).
    public static func socketAddress(_ address: MDNSAddress, port: UInt16, interfaceIndex: Int) -> SocketAddress {
        switch address {
        case .ipv4(let value):
            var raw = sockaddr_in()
            raw.sin_family = sa_family_t(AF_INET)
            raw.sin_port = port.bigEndian
            raw.sin_addr = in_addr(s_addr: value.bigEndian)
            return SocketAddress(raw, host: address.description)
        case .ipv6(let bytes):
            var raw = sockaddr_in6()
            raw.sin6_family = sa_family_t(AF_INET6)
            raw.sin6_port = port.bigEndian
            raw.sin6_scope_id = UInt32(truncatingIfNeeded: interfaceIndex)
            withUnsafeMutableBytes(of: &raw.sin6_addr) { target in
                for (index, byte) in bytes.prefix(16).enumerated() { target[index] = byte }
            }
            return SocketAddress(raw, host: address.description)
        }
    }
}
