import MultipeerDNS
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// An advertiser with two interfaces on one link hears each of its packets on the other
/// interface too (IPv6 delivers them; IPv4 drops packets from a local source address). Its own
/// probes, carrying the other interface's addresses, are no rival's.
@Suite("An advertiser on two interfaces of one link")
struct SharedLinkAdvertiserTests {
    static func ipv6(_ last: UInt8) -> MDNSAddress { .ipv6([0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [last]) }

    @Test(arguments: [false, true])
    func itsOwnProbesFromTheOtherInterfaceDoNotHoldItBack(ipv6: Bool) throws {
        // 169.254.1.1/24 and 169.254.2.1/24: two subnets on one link. Sent to the group, each
        // interface's packets are on the other's link all the same (RFC 6762 §11).
        let interfaces = [1, 2].map { (index: Int) in
            let address = ipv6 ? Self.ipv6(UInt8(index)) : .ipv4(0xA9FE_0001 | UInt32(index) << 8)
            return MDNSInterface(index: index, name: "mp\(index - 1)", addresses: [address], subnets: [MDNSSubnet(address: address, prefixLength: ipv6 ? 64 : 24)])
        }
        // So the core takes them: a pass below is not their being dropped.
        #expect(MDNSSource(address: interfaces[0].addresses[0], port: MDNS.port, interfaceIndex: 2, sentToGroup: true).isOnLink(among: interfaces))
        let peer = try WirePeerID(identifier: Bytes16(high: 7, low: 7), displayName: "Bob")
        var core = try MDNSAdvertiserCore(
            serviceType: try ServiceType("chat"), peer: peer, port: 7000, discoveryInfo: [:], interfaces: interfaces,
            random: SeededGenerator(seed: 9))
        var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        let started = now
        core.start(now: now)
        // Every packet it sends reaches it again on the other interface, a millisecond later.
        for _ in 0..<1_000 where core.phase != .running {
            guard let next = core.nextDeadline, next - started < .seconds(10) else { break }
            now = next
            core.advance(now: now)
            for packet in core.takePackets() {
                guard case .multicast(let from, _) = packet.destination else { continue }
                let to = from == 1 ? 2 : 1
                let source = MDNSSource(address: interfaces[from - 1].addresses[0], port: MDNS.port, interfaceIndex: to, sentToGroup: true)
                core.received(try DNSMessage.decode(try packet.message.encoded()), from: source, now: now + .milliseconds(1))
            }
        }
        #expect(core.phase == .running)
        // Three probes 250 ms apart, then two announcements a second apart: about 1.5 s, and no rename.
        #expect(now - started < .seconds(2), "running after \(now - started)")
        #expect(core.takeEvents() == [.announced])
    }
}
