import MultipeerDNS
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery

/// Packets whose source is not on the receiving interface's link (RFC 6762 §11) change nothing:
/// no answer, no rename, no peer. Each test has an on-link control, so a pass is not silence.
@Suite("Discovery cores ignore packets from off the link")
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

    @Test func aLegacyQueryFromOffTheLinkGetsNoAnswer() throws {
        let (lan, a) = try Self.announced(seed: 31)
        let query = DNSMessage(id: 7, isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
        let before = lan.sent.count
        lan.inject(query, segment: 0, from: Self.offLink, port: 40_000)
        lan.run(for: .seconds(2))
        #expect(Self.packets(lan, from: a, after: before).isEmpty, "answered an off-link querier")
        // The same query from the link is answered, straight back to its port.
        lan.inject(query, segment: 0, from: Self.onLink, port: 40_000)
        lan.run(for: .seconds(2))
        let answers = Self.packets(lan, from: a, after: before)
        #expect(answers.count == 1)
        #expect(answers.first?.destination == .unicast(MDNSSource(address: Self.onLink, port: 40_000, interfaceIndex: 1)))
    }

    @Test func aMulticastQueryFromOffTheLinkGetsNoAnswer() throws {
        let (lan, a) = try Self.announced(seed: 32)
        let query = DNSMessage(isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
        let before = lan.sent.count
        lan.inject(query, segment: 0, from: Self.offLink)
        lan.run(for: .seconds(2))
        #expect(Self.packets(lan, from: a, after: before).isEmpty, "answered an off-link querier")
        lan.inject(query, segment: 0, from: Self.onLink)
        lan.run(for: .seconds(2))
        #expect(Self.packets(lan, from: a, after: before).count == 1)
    }

    /// Conflicting answers for the name being probed: from off the link they force no rename;
    /// from the link, the same packets do.
    @Test(arguments: [false, true])
    func aConflictFromOffTheLinkForcesNoRename(fromTheLink: Bool) throws {
        let lan = VirtualLAN(seed: 33)
        let a = lan.addNode()
        try lan.advertise(on: a, peer: lan.peer("Victim"))
        let original = a.advertisers[0].instanceName
        for _ in 0..<20 {
            let rival = DNSResourceRecord(name: a.advertisers[0].instanceName, ttl: 120, data: .txt([Array("z=rival".utf8)]), cacheFlush: true)
            lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: [rival]), segment: 0, from: fromTheLink ? Self.onLink : Self.offLink)
            lan.run(for: .milliseconds(100))
        }
        let renames = a.advertiserEvents.filter { if case .renamed = $0 { true } else { false } }
        if fromTheLink {
            #expect(!renames.isEmpty, "the on-link control did not rename")
        } else {
            #expect(renames.isEmpty, "renamed by an off-link response: \(renames)")
            lan.run(for: .seconds(3))
            #expect(a.advertisers[0].phase == .running && a.advertisers[0].instanceName == original)
        }
    }

    /// A complete advertisement from off the link plants no peer in a browser; from the link it does.
    @Test(arguments: [false, true])
    func anAdvertisementFromOffTheLinkPlantsNoPeer(fromTheLink: Bool) throws {
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
        lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: records), segment: 0, from: fromTheLink ? Self.onLink : Self.offLink)
        lan.run(for: .seconds(2))
        if fromTheLink {
            #expect(b.found == [fake], "the on-link control planted nothing")
        } else {
            #expect(b.found.isEmpty, "an off-link response planted \(b.found)")
            #expect(b.browsers[0].cachedRecordCount == 0)
        }
    }
}
