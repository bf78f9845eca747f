import MultipeerDNS
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// RFC 6762 §11's rule itself: which sources are on an interface's link.
@Suite("On-link sources")
struct OnLinkSourceTests {
    static func ipv6(_ groups: [UInt16]) -> MDNSAddress { .ipv6(groups.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }) }

    @Test func aNetmaskGivesThePrefixLength() {
        let address = MDNSAddress.ipv4(0xC0A8_0105)
        #expect(MDNSSubnet(address: address, netmask: .ipv4(0xFFFF_FF00)).prefixLength == 24)
        #expect(MDNSSubnet(address: address, netmask: .ipv4(0xFFFF_F000)).prefixLength == 20)
        #expect(MDNSSubnet(address: address, netmask: .ipv4(0xFFFF_FFFF)).prefixLength == 32)
        #expect(MDNSSubnet(address: address, netmask: .ipv4(0)).prefixLength == 0)
        // No netmask, or one of the other family: the address alone.
        #expect(MDNSSubnet(address: address, netmask: nil).prefixLength == 32)
        #expect(MDNSSubnet(address: address, netmask: Self.ipv6([0xFFFF])).prefixLength == 32)
        let v6 = Self.ipv6([0x2001, 0xDB8, 0, 1, 0, 0, 0, 5])
        #expect(MDNSSubnet(address: v6, netmask: Self.ipv6([0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0, 0, 0, 0])).prefixLength == 64)
        #expect(MDNSSubnet(address: v6, netmask: nil).prefixLength == 128)
    }

    static let eth0 = MDNSInterface(
        index: 3, name: "eth0", addresses: [.ipv4(0xC0A8_0105), ipv6([0x2001, 0xDB8, 0, 1, 0, 0, 0, 5])],
        subnets: [
            MDNSSubnet(address: .ipv4(0xC0A8_0105), prefixLength: 24),
            MDNSSubnet(address: ipv6([0x2001, 0xDB8, 0, 1, 0, 0, 0, 5]), prefixLength: 64),
        ])

    /// Whether a packet from `address`, arriving on eth0 (sent to us, or to the group), is taken.
    static func onLink(_ address: MDNSAddress, toGroup: Bool = false, interfaceIndex: Int = 3) -> Bool {
        MDNSSource(address: address, port: MDNS.port, interfaceIndex: interfaceIndex, sentToGroup: toGroup).isOnLink(among: [eth0])
    }

    /// Sent straight to us, a packet is on-link from inside one of the interface's subnets, or from IPv6 link-local.
    @Test func aUnicastSourceIsOnLinkInsideOneOfTheInterfaceSubnets() {
        #expect(Self.onLink(.ipv4(0xC0A8_01FE)))  // 192.168.1.254
        #expect(!Self.onLink(.ipv4(0xC0A8_0205)))  // 192.168.2.5
        #expect(!Self.onLink(.ipv4(0x0808_0808)))
        #expect(Self.onLink(Self.ipv6([0x2001, 0xDB8, 0, 1, 0xAAAA, 0, 0, 9])))
        #expect(!Self.onLink(Self.ipv6([0x2001, 0xDB8, 0, 2, 0, 0, 0, 5])))
        // fe80::/10 is on every interface's link; fec0:: (outside the /10) is not.
        #expect(Self.onLink(Self.ipv6([0xFE80, 0, 0, 0, 0, 0, 0, 7])))
        #expect(Self.onLink(Self.ipv6([0xFEBF, 0, 0, 0, 0, 0, 0, 7])))
        #expect(!Self.onLink(Self.ipv6([0xFEC0, 0, 0, 0, 0, 0, 0, 7])))
        // An IPv4 source is never inside an IPv6 prefix, nor the other way round.
        #expect(!MDNSSubnet(address: Self.ipv6([0]), prefixLength: 0).contains(.ipv4(1)))
    }

    /// Sent to the group, a packet is link-scope: on-link whatever its source (other subnets on
    /// the link, IPv4 link-local hosts, misconfigured ones).
    @Test func aPacketSentToTheGroupIsOnLinkWhateverItsSource() {
        for address in [MDNSAddress.ipv4(0xC0A8_0205), .ipv4(0xA9FE_0707), .ipv4(0x0808_0808), Self.ipv6([0x2001, 0xDB8, 0, 2, 0, 0, 0, 5])] {
            #expect(Self.onLink(address, toGroup: true), "\(address)")
            #expect(!Self.onLink(address), "\(address) sent straight to us")
        }
        #expect(MDNSAddress.ipv4(0xE000_00FB).isMDNSGroup && MDNSAddress.ipv6(MDNS.ipv6Group).isMDNSGroup)
        #expect(!MDNSAddress.ipv4(0xE000_00FC).isMDNSGroup && !MDNSAddress.ipv4(0xC0A8_0105).isMDNSGroup)
    }

    /// A packet on an interface the core does not know is off every link, even one sent to the group.
    @Test func aPacketOnAnUnknownInterfaceIsOffLink() {
        #expect(!Self.onLink(.ipv4(0xC0A8_01FE), interfaceIndex: 4))
        #expect(!Self.onLink(.ipv4(0xC0A8_01FE), toGroup: true, interfaceIndex: 4))
    }
}
