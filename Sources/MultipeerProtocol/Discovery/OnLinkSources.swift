/// One subnet on an interface's link: an address with its prefix length.
public struct MDNSSubnet: Hashable, Sendable {
    public let address: MDNSAddress
    /// Bits; 0...32 for IPv4, 0...128 for IPv6.
    public let prefixLength: Int

    public init(address: MDNSAddress, prefixLength: Int) {
        self.address = address
        self.prefixLength = min(max(prefixLength, 0), address.bitCount)
    }

    /// `netmask` as the system lists it; its leading one bits are the prefix. Without one (or
    /// with one of the other family) the subnet is the address alone: nothing else is assumed on-link.
    public init(address: MDNSAddress, netmask: MDNSAddress?) {
        guard let mask = netmask, mask.isIPv6 == address.isIPv6 else {
            self.init(address: address, prefixLength: address.bitCount)
            return
        }
        var ones = 0
        for byte in mask.bytes {
            ones += (~byte).leadingZeroBitCount
            if byte != 0xFF { break }
        }
        self.init(address: address, prefixLength: ones)
    }

    public func contains(_ other: MDNSAddress) -> Bool {
        guard other.isIPv6 == address.isIPv6 else { return false }
        return Self.samePrefix(address.bytes, other.bytes, bits: prefixLength)
    }

    static func samePrefix(_ a: [UInt8], _ b: [UInt8], bits: Int) -> Bool {
        guard a.count == b.count, bits <= a.count * 8 else { return false }
        let whole = bits / 8
        guard a.prefix(whole) == b.prefix(whole) else { return false }
        let rest = bits % 8
        guard rest > 0 else { return true }
        let mask = UInt8(0xFF) << (8 - rest)
        return a[whole] & mask == b[whole] & mask
    }
}

package extension MDNSAddress {
    /// Network order bytes: 4 for IPv4, 16 for IPv6 (short input padded with zeros).
    var bytes: [UInt8] {
        switch self {
        case .ipv4(let value): withUnsafeBytes(of: value.bigEndian, Array.init)
        case .ipv6(let bytes): Array(bytes.prefix(16)) + [UInt8](repeating: 0, count: max(0, 16 - bytes.count))
        }
    }

    var bitCount: Int { isIPv6 ? 128 : 32 }

    /// fe80::/10: on the link of whatever interface it arrived on.
    var isIPv6LinkLocal: Bool {
        guard isIPv6 else { return false }
        let bytes = bytes
        return bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80
    }
}

package extension MDNSSource {
    /// RFC 6762 §11, the one place the rule lives: mDNS takes packets from its own link only.
    /// Sent to the group, a packet is link-scope (never routed), so it is on-link whatever its
    /// source: several subnets on one link, or a misconfigured host, still work. Sent straight
    /// to us, it is on-link when its source lies in one of the arrival interface's subnets or
    /// is IPv6 link-local. A packet on an interface the core does not know is on no link of ours.
    func isOnLink(among interfaces: [MDNSInterface]) -> Bool {
        guard let interface = interfaces.first(where: { $0.index == interfaceIndex }) else { return false }
        return sentToGroup || address.isIPv6LinkLocal || interface.subnets.contains { $0.contains(address) }
    }
}
