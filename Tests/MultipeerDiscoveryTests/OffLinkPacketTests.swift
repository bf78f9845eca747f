import MultipeerDNS
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// RFC 6762 §11 in the cores: a packet sent straight to a node (not to the mDNS group) from
/// outside the receiving interface's subnets changes nothing: no answer, no rename, no peer. One
/// sent to the group is on-link whatever its source. Each test has an on-link control, so a pass
/// is not silence.
@Suite("Discovery cores ignore unicast packets from off the link")
struct OffLinkPacketTests {
    /// 192.168.7.7: routable, but not in segment 0's 10.0.0.0/24.
    static let offLink = MDNSAddress.ipv4(0xC0A8_0707)
    static let onLink = VirtualLAN.address(segment: 0, host: 77)

    static func announced(seed: UInt64) throws -> (VirtualLAN, VirtualLAN.Node) {
        let lan = VirtualLAN(seed: seed)
        let a = lan.addNode()
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        lan.run(for: .seconds(5))
        #expect(a.advertisers[0].phase == .running)
        return (lan, a)
    }

    static func packets(_ lan: VirtualLAN, from node: VirtualLAN.Node, after count: Int) -> [MDNSPacket] {
        lan.sent.dropFirst(count).filter { $0.from == node.index }.map(\.packet)
    }

    @Test func aUnicastLegacyQueryFromOffTheSubnetGetsNoAnswer() throws {
        let (lan, a) = try Self.announced(seed: 31)
        let query = DNSMessage(id: 7, isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
        let before = lan.sent.count
        lan.inject(query, segment: 0, from: Self.offLink, port: 40_000, toGroup: false)
        lan.run(for: .seconds(2))
        #expect(Self.packets(lan, from: a, after: before).isEmpty, "answered an off-link querier")
        // The same query from the subnet is answered, straight back to its port.
        lan.inject(query, segment: 0, from: Self.onLink, port: 40_000, toGroup: false)
        lan.run(for: .seconds(2))
        let answers = Self.packets(lan, from: a, after: before)
        #expect(answers.count == 1)
        #expect(answers.first?.destination == .unicast(MDNSSource(address: Self.onLink, port: 40_000, interfaceIndex: 1, sentToGroup: false)))
    }

    /// Sent to the group, a query from another subnet on the link is answered: by multicast, and a
    /// legacy one straight back to its source.
    @Test func aQueryToTheGroupFromAnotherSubnetIsAnswered() throws {
        let (lan, a) = try Self.announced(seed: 32)
        let service = try ServiceType("chat").serviceName
        let before = lan.sent.count
        lan.inject(DNSMessage(isResponse: false, questions: [DNSQuestion(name: service, type: .ptr)]), segment: 0, from: Self.offLink)
        lan.run(for: .seconds(2))
        let multicast = Self.packets(lan, from: a, after: before)
        #expect(multicast.count == 1)
        #expect(multicast.first?.destination == .multicast(interfaceIndex: 1, ipv6: false))
        let afterMulticast = lan.sent.count
        lan.inject(DNSMessage(id: 7, isResponse: false, questions: [DNSQuestion(name: service, type: .ptr)]), segment: 0, from: Self.offLink, port: 40_000)
        lan.run(for: .seconds(2))
        let legacy = Self.packets(lan, from: a, after: afterMulticast)
        #expect(legacy.count == 1)
        #expect(legacy.first?.destination == .unicast(MDNSSource(address: Self.offLink, port: 40_000, interfaceIndex: 1, sentToGroup: true)))
    }

    /// Who sent a response: from another subnet straight to us (off-link), from another subnet
    /// to the group (on-link: link-scope), from the subnet straight to us (on-link).
    enum Sender: CaseIterable, Sendable {
        case offSubnetUnicast, offSubnetToGroup, onSubnetUnicast

        var address: MDNSAddress { self == .onSubnetUnicast ? OffLinkPacketTests.onLink : OffLinkPacketTests.offLink }
        var toGroup: Bool { self == .offSubnetToGroup }
        var isOnLink: Bool { self != .offSubnetUnicast }
    }

    /// Conflicting answers for the name being probed: sent straight to us from off the link they
    /// force no rename; from the link, or to the group from anywhere, the same packets do.
    @Test(arguments: Sender.allCases)
    func aConflictFromOffTheLinkForcesNoRename(sender: Sender) throws {
        let lan = VirtualLAN(seed: 33)
        let a = lan.addNode()
        try lan.advertise(on: a, peer: lan.peer("Victim"))
        let original = a.advertisers[0].instanceName
        for _ in 0..<20 {
            let rival = DNSResourceRecord(name: a.advertisers[0].instanceName, ttl: 120, data: .txt([Array("z=rival".utf8)]), cacheFlush: true)
            lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: [rival]), segment: 0, from: sender.address, toGroup: sender.toGroup)
            lan.run(for: .milliseconds(100))
        }
        let renames = a.advertiserEvents.filter { if case .renamed = $0 { true } else { false } }
        if sender.isOnLink {
            #expect(!renames.isEmpty, "an on-link response did not rename")
        } else {
            #expect(renames.isEmpty, "renamed by an off-link response: \(renames)")
            lan.run(for: .seconds(3))
            #expect(a.advertisers[0].phase == .running && a.advertisers[0].instanceName == original)
        }
    }

    /// A complete advertisement sent straight to a browser from off the link plants no peer; from
    /// the link, or to the group from anywhere, it does.
    @Test(arguments: Sender.allCases)
    func anAdvertisementFromOffTheLinkPlantsNoPeer(sender: Sender) throws {
        let lan = VirtualLAN(seed: 34)
        let b = lan.addNode()
        try lan.browse(on: b)
        let fake = lan.peer("Planted")
        let service = try ServiceType("chat").serviceName
        let instance = try service.prepending(DiscoveryTXT.hex(fake.identifier))
        let host = try DNSName("planted.local")
        let records = [
            DNSResourceRecord(name: service, ttl: 4_500, data: .ptr(instance)),
            DNSResourceRecord(name: instance, ttl: 120, data: .srv(priority: 0, weight: 0, port: 9, target: host), cacheFlush: true),
            DNSResourceRecord(name: instance, ttl: 4_500, data: .txt(try DiscoveryTXT.encode(fake, info: [:])), cacheFlush: true),
            DNSResourceRecord(name: host, ttl: 120, data: .a(0xC0A8_0707), cacheFlush: true),
        ]
        lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: records), segment: 0, from: sender.address, toGroup: sender.toGroup)
        lan.run(for: .seconds(2))
        if sender.isOnLink {
            #expect(b.found == [fake], "an on-link response planted nothing")
        } else {
            #expect(b.found.isEmpty, "an off-link response planted \(b.found)")
            #expect(b.browsers[0].cachedRecordCount == 0)
        }
    }
}
