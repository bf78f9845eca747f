import MultipeerDNS
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// A change of an interface's subnets alone (the same addresses) changes who is on-link and
/// nothing else: no announcement, no query; a change of address still does both.
@Suite("Subnet changes")
struct SubnetChangeTests {
    static let own = MDNSAddress.ipv4(0x0A00_0001)
    /// 10.0.1.5: outside 10.0.0.0/24, inside 10.0.0.0/16.
    static let neighbour = MDNSAddress.ipv4(0x0A00_0105)
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func interfaces(prefixLength: Int, address: MDNSAddress = own) -> [MDNSInterface] {
        [MDNSInterface(index: 1, name: "mp0", addresses: [address], subnets: [MDNSSubnet(address: address, prefixLength: prefixLength)])]
    }

    /// Runs the core's timers from `now` for `duration`; the packets they sent.
    static func run<Core: MDNSCore>(_ core: inout Core, from now: inout NIODeadline, for duration: TimeAmount) -> [MDNSPacket] {
        let end = now + duration
        var packets: [MDNSPacket] = []
        while let next = core.nextDeadline, next <= end {
            now = max(now, next)
            core.advance(now: now)
            packets += core.takePackets()
        }
        now = end
        return packets + core.takePackets()
    }

    @Test func anAdvertiserTakesNewSubnetsWithoutAnnouncing() throws {
        var core = try MDNSAdvertiserCore(
            serviceType: try ServiceType("chat"), peer: try WirePeerID(identifier: Bytes16(high: 1, low: 2), displayName: "Alice"), port: 7000,
            discoveryInfo: [:], interfaces: Self.interfaces(prefixLength: 24), random: SeededGenerator(seed: 5))
        var now = Self.start
        core.start(now: now)
        _ = Self.run(&core, from: &now, for: .seconds(5))
        #expect(core.phase == .running)
        let query = DNSMessage(id: 7, isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
        let legacy = MDNSSource(address: Self.neighbour, port: 40_000, interfaceIndex: 1, sentToGroup: false)
        core.received(query, from: legacy, now: now)
        #expect(core.takePackets().isEmpty, "answered a unicast query from outside the /24")

        core.updateInterfaces(Self.interfaces(prefixLength: 16), now: now)
        #expect(Self.run(&core, from: &now, for: .seconds(3)).isEmpty, "new subnets alone re-announced")
        // The new subnet is in force: the neighbour is on-link now.
        core.received(query, from: legacy, now: now)
        #expect(core.takePackets().map(\.destination) == [.unicast(legacy)])

        // Control: a new address is announced.
        core.updateInterfaces(Self.interfaces(prefixLength: 16, address: .ipv4(0x0A00_0002)), now: now)
        let announced = Self.run(&core, from: &now, for: .seconds(3))
        #expect(announced.contains { $0.message.answers.contains { $0.data == .a(0x0A00_0002) } }, "a new address was not announced")
    }

    @Test func aBrowserTakesNewSubnetsWithoutAskingAgain() throws {
        var core = MDNSBrowserCore(
            serviceType: try ServiceType("chat"), localIdentifier: Bytes16(high: 0, low: 1), interfaces: Self.interfaces(prefixLength: 24),
            random: SeededGenerator(seed: 6))
        var now = Self.start
        core.start(now: now)
        // Queries about 1 s and 2 s apart, then 4 s: none due for over 3 s after this.
        #expect(Self.run(&core, from: &now, for: .milliseconds(3_500)).count >= 3)
        core.updateInterfaces(Self.interfaces(prefixLength: 16), now: now)
        #expect(core.interfaces == Self.interfaces(prefixLength: 16))
        #expect(Self.run(&core, from: &now, for: .seconds(3)).isEmpty, "new subnets alone brought a query forward")
        // Control: a new address asks again at once.
        core.updateInterfaces(Self.interfaces(prefixLength: 16, address: .ipv4(0x0A00_0002)), now: now)
        #expect(!Self.run(&core, from: &now, for: .milliseconds(100)).isEmpty, "a new address was not queried")
    }
}
