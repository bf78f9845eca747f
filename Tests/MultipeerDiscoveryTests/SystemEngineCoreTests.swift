import MultipeerDNS
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// The system engine's cores (what goes to avahi-daemon and how its answers become events),
/// held to what the embedded cores do. Avahi itself is exercised in DiscoverySystemEngineTests.
@Suite("System engine cores")
struct SystemEngineCoreTests {
    static let type = try! ServiceType("chat")
    static let local = Bytes16(high: 0, low: 1)
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func peer(_ name: String, _ low: UInt64) -> WirePeerID {
        try! WirePeerID(identifier: Bytes16(high: 0xAB, low: low), displayName: name)
    }

    static func key(_ name: String, interface: Int = 2, ipv6: Bool = false) -> SystemServiceKey {
        SystemServiceKey(interfaceIndex: interface, ipv6: ipv6, name: name, domain: "local")
    }

    /// One address in 169.254.0.0/16, or (`prefixLength`) another subnet.
    static func interface(_ index: Int, _ name: String, _ address: MDNSAddress, prefixLength: Int = 16) -> MDNSInterface {
        MDNSInterface(index: index, name: name, addresses: [address], subnets: [MDNSSubnet(address: address, prefixLength: prefixLength)])
    }

    static func txt(_ peer: WirePeerID, _ info: [String: String] = [:]) -> [[UInt8]] {
        try! DiscoveryTXT.encode(peer, info: info)
    }

    // MARK: Advertiser

    @Test func publishesTheNamesAndDataTheEmbeddedAdvertiserDoes() throws {
        let peer = Self.peer("Alice", 7)
        let interfaces = [Self.interface(2, "mp0", .ipv4(0xA9FE_0101))]
        let embedded = try MDNSAdvertiserCore(serviceType: Self.type, peer: peer, port: 4242, discoveryInfo: ["room": "42"], interfaces: interfaces)
        var system = try SystemAdvertiserCore(serviceType: Self.type, peer: peer, port: 4242, discoveryInfo: ["room": "42"], interfaces: interfaces)
        guard case .publish(let publication) = system.daemonRan().first else {
            Issue.record("no publish")
            return
        }
        let records = embedded.records(interfaceIndex: 2, ipv6: false)
        #expect(try Self.type.serviceName.prepending(Array(publication.instanceLabel.utf8)) == embedded.instanceName)
        #expect(publication.instanceLabel == DiscoveryTXT.hex(peer.identifier))
        #expect(publication.serviceType == "_chat._tcp")
        #expect(try DNSName(publication.hostName) == embedded.hostName)
        #expect(records.contains { $0.data == .srv(priority: 0, weight: 0, port: 4242, target: embedded.hostName) && publication.port == 4242 })
        #expect(records.contains { $0.data == .txt(publication.txt) })
        #expect(publication.interfaces == interfaces)
    }

    /// Interfaces that come and go: only what changed is withdrawn or published, under the
    /// names held; nothing is done while nothing is published but remembering the list.
    @Test func interfaceChangesTouchOnlyWhatChanged() throws {
        let first = Self.interface(2, "mp0", .ipv4(0xA9FE_0101))
        let second = Self.interface(3, "mp1", .ipv4(0xA9FE_0201))
        var core = try SystemAdvertiserCore(serviceType: Self.type, peer: Self.peer("Alice", 7), port: 1, discoveryInfo: [:], interfaces: [first])
        _ = core.daemonRan()
        #expect(core.updateInterfaces([first]).isEmpty)
        // New subnets alone: nothing to withdraw or publish again.
        #expect(core.updateInterfaces([Self.interface(2, "mp0", .ipv4(0xA9FE_0101), prefixLength: 24)]).isEmpty)
        let added = core.updateInterfaces([first, second])
        guard case .publish(let publication) = added.first, added.count == 1 else { Issue.record("\(added)"); return }
        #expect(publication.interfaces == [second] && publication.instanceLabel == DiscoveryTXT.hex(Self.peer("Alice", 7).identifier))
        #expect(core.updateInterfaces([first]) == [.withdrawFrom(interfaceIndexes: [3])])
        let moved = Self.interface(2, "mp0", .ipv4(0xA9FE_0102))
        let changed = core.updateInterfaces([moved])
        #expect(changed.first == .withdrawFrom(interfaceIndexes: [2]) && changed.count == 2)
        if case .publish(let again) = changed.last { #expect(again.interfaces == [moved]) } else { Issue.record("\(changed)") }
        // Nothing published (the daemon went away): the list is kept for the next publish.
        core.daemonLost()
        #expect(core.updateInterfaces([moved, second]) == [])
        guard case .publish(let next) = core.daemonRan().first else { Issue.record("no publish"); return }
        #expect(next.interfaces == [moved, second])
        #expect(core.takeEvents().isEmpty)
    }

    @Test func announcedIsReportedOncePerName() throws {
        var core = try SystemAdvertiserCore(serviceType: Self.type, peer: Self.peer("Alice", 7), port: 1, discoveryInfo: [:], interfaces: [])
        _ = core.daemonRan()
        core.established()
        core.established()
        #expect(core.takeEvents() == [.announced])
    }

    @Test func aCollisionRenamesAsTheEmbeddedAdvertiserDoesWithTheSameThrottle() throws {
        let peer = Self.peer("Alice", 7)
        var core = try SystemAdvertiserCore(serviceType: Self.type, peer: peer, port: 1, discoveryInfo: [:], interfaces: [])
        _ = core.daemonRan()
        core.established()
        #expect(core.takeEvents() == [.announced])
        let hex = DiscoveryTXT.hex(peer.identifier)
        // 14 conflicts within 10 s: renamed and published again at once each time.
        for suffix in 2...15 {
            let actions = core.collision(now: Self.start + .milliseconds(Int64(suffix) * 100))
            #expect(actions.count == 2 && actions.first == .withdraw)
            guard case .publish(let publication) = actions.last else {
                Issue.record("no publish after conflict \(suffix - 1)")
                return
            }
            #expect(publication.instanceLabel == "\(hex)-\(suffix)")
            #expect(publication.hostName == "mpc-\(hex)-chat-\(suffix).local")
            #expect(core.takeEvents() == [.renamed(try Self.type.serviceName.prepending(Array("\(hex)-\(suffix)".utf8)))])
        }
        // The 15th waits 5 s (RFC 6762 §8.1); nothing is published in between.
        #expect(core.collision(now: Self.start + .seconds(2)) == [.withdraw, .wake(after: .seconds(5))])
        #expect(core.daemonRan() == [])
        guard case .publish(let publication) = core.wake().first else {
            Issue.record("no publish after the wait")
            return
        }
        #expect(publication.instanceLabel == "\(hex)-16")
        #expect(core.wake() == [])
    }

    @Test func followsTheDaemonAwayAndBack() throws {
        var core = try SystemAdvertiserCore(serviceType: Self.type, peer: Self.peer("Alice", 7), port: 1, discoveryInfo: [:], interfaces: [])
        #expect(core.daemonRan().count == 1)
        #expect(core.daemonRan() == [], "published once")
        #expect(core.daemonRegistering() == [.withdraw])
        #expect(core.daemonRan().count == 1, "published again once the daemon runs")
        core.daemonLost()
        #expect(core.collision(now: Self.start) == [], "nothing published to collide")
        #expect(core.daemonRan().count == 1, "published again when the daemon is back")
    }

    // MARK: Browser

    @Test func onePeerFoundOnceAcrossInterfacesAndProtocolsAndLostOnce() {
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let alice = Self.peer("Alice", 7)
        let name = DiscoveryTXT.hex(alice.identifier)
        let keys = [Self.key(name, interface: 2), Self.key(name, interface: 2, ipv6: true), Self.key(name, interface: 3)]
        for key in keys { #expect(core.serviceAdded(key, now: Self.start) == [.resolve(key)]) }
        #expect(core.serviceAdded(keys[0], now: Self.start) == [], "already resolving")
        core.resolved(keys[1], address: .ipv6([0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1]), port: 9, txt: Self.txt(alice, ["k": "v"]))
        core.resolved(keys[0], address: .ipv4(0xA9FE_0102), port: 9, txt: Self.txt(alice, ["k": "v"]))
        core.resolved(keys[2], address: .ipv4(0xA9FE_0201), port: 9, txt: Self.txt(alice, ["k": "v"]))
        let events = core.takeEvents()
        #expect(events.filter { !$0.isMove }.count == 1)
        guard case .found(let found) = events.first else { return }
        #expect(found.peer == alice && found.discoveryInfo == ["k": "v"])
        // Found at the first resolution; later ones add endpoints, each a move (for sessions).
        #expect(events.dropFirst().allSatisfy { $0.isMove } && events.count == 3)
        #expect(found.endpoints.map(\.address.description) == ["fe80::1"])
        #expect(core.foundPeers.first?.endpoints.map(\.address.description) == ["169.254.1.2", "169.254.2.1", "fe80::1"])
        #expect(core.serviceRemoved(keys[0]) == [.stopResolving(keys[0])])
        #expect(core.serviceRemoved(keys[2]) == [.stopResolving(keys[2])])
        #expect(core.takeEvents().map(\.isMove) == [true, true], "still there over IPv6")
        _ = core.serviceRemoved(keys[1])
        #expect(core.takeEvents() == [.lost(alice)])
        #expect(core.instanceCount == 0)
    }

    @Test func neverTheLocalPeerNorAnInstanceWithoutAValidTXT() {
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let me = try! WirePeerID(identifier: Self.local, displayName: "me")
        let invalid: [[[UInt8]]] = [
            Self.txt(me),
            [Array("txtvers=1".utf8), Array("mpcdn=NoID".utf8)],
            [Array("mpcid=0123".utf8), Array("mpcdn=Short".utf8)],
            [Array("mpcid=\(DiscoveryTXT.hex(Bytes16(high: 1, low: 1)))".utf8)],
        ]
        for (index, txt) in invalid.enumerated() {
            let key = Self.key("instance\(index)")
            _ = core.serviceAdded(key, now: Self.start)
            core.resolved(key, address: .ipv4(0x0A00_0001), port: 1, txt: txt)
        }
        #expect(core.takeEvents().isEmpty)
    }

    @Test func oneIdentifierUnderTwoNamesIsOnePeerTheFirstNameWins() throws {
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let alice = Self.peer("Alice", 7)
        let hex = DiscoveryTXT.hex(alice.identifier)
        for (name, address) in [("\(hex)-2", UInt32(0x0A00_0002)), (hex, UInt32(0x0A00_0001))] {
            _ = core.serviceAdded(Self.key(name), now: Self.start)
            core.resolved(Self.key(name), address: .ipv4(address), port: 1, txt: Self.txt(alice))
        }
        let events = core.takeEvents()
        #expect(events.filter { !$0.isMove }.count == 1)
        #expect(core.foundPeers.first?.instance == (try Self.type.serviceName.prepending(Array(hex.utf8))))
        _ = core.serviceRemoved(Self.key(hex))
        // Not lost: the twin carries the peer, at its own address.
        #expect(core.takeEvents().allSatisfy { $0.isMove }, "the twin still carries the peer")
    }

    @Test func aFailedResolutionLosesThePeerAndRetriesWithBackoff() {
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let alice = Self.peer("Alice", 7)
        let key = Self.key(DiscoveryTXT.hex(alice.identifier))
        _ = core.serviceAdded(key, now: Self.start)
        core.resolved(key, address: .ipv4(1), port: 1, txt: Self.txt(alice))
        #expect(core.takeEvents().count == 1)
        var intervals: [TimeAmount] = []
        for _ in 0..<8 {
            let actions = core.resolveFailed(key)
            guard actions.count == 2, actions[0] == .stopResolving(key), case .retry(let retried, let after) = actions[1], retried == key else {
                Issue.record("\(actions)")
                return
            }
            intervals.append(after)
            #expect(core.retry(key) == [.resolve(key)])
        }
        #expect(intervals == [1, 2, 4, 8, 16, 32, 60, 60].map { TimeAmount.seconds($0) })
        #expect(core.takeEvents() == [.lost(alice)])
        core.resolved(key, address: .ipv4(1), port: 1, txt: Self.txt(alice))
        #expect(core.takeEvents().count == 1, "found again")
        #expect(core.resolveFailed(key).last == .retry(key, after: .seconds(1)), "backoff restarts after a success")
        _ = core.serviceRemoved(key)
        #expect(core.retry(key) == [], "no retry for a removed service")
    }

    @Test func theInstanceCapHoldsAndUnresolvedInstancesMakeWay() {
        var limits = MDNSBrowserCore.Limits()
        limits.maxInstances = 2
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local, limits: limits)
        let alice = Self.peer("Alice", 7)
        _ = core.serviceAdded(Self.key("resolved"), now: Self.start)
        core.resolved(Self.key("resolved"), address: .ipv4(1), port: 1, txt: Self.txt(alice))
        _ = core.serviceAdded(Self.key("silent"), now: Self.start)
        #expect(core.serviceAdded(Self.key("third"), now: Self.start + .seconds(4)) == [], "full, and the silent one is young")
        #expect(core.serviceAdded(Self.key("third"), now: Self.start + .seconds(6)) == [.stopResolving(Self.key("silent")), .resolve(Self.key("third"))])
        #expect(core.instanceCount == 2)
        #expect(core.serviceAdded(Self.key("fourth"), now: Self.start + .seconds(20)) == [.stopResolving(Self.key("third")), .resolve(Self.key("fourth"))])
        #expect(core.foundPeers.map(\.peer) == [alice], "a resolved peer never makes way")
        #expect(core.serviceAdded(Self.key("x", interface: 2).withDomain("example.com"), now: Self.start) == [], "only .local")
    }

    @Test func theDaemonGoingAwayLosesEveryPeerAndStopLosesNone() {
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let (alice, bob) = (Self.peer("Alice", 7), Self.peer("Bob", 8))
        for peer in [alice, bob] {
            let key = Self.key(DiscoveryTXT.hex(peer.identifier))
            _ = core.serviceAdded(key, now: Self.start)
            core.resolved(key, address: .ipv4(1), port: 1, txt: Self.txt(peer))
        }
        #expect(core.takeEvents().count == 2)
        core.daemonLost()
        #expect(core.takeEvents() == [.lost(alice), .lost(bob)].sorted { $0.identifier < $1.identifier })
        let key = Self.key(DiscoveryTXT.hex(alice.identifier))
        _ = core.serviceAdded(key, now: Self.start)
        core.resolved(key, address: .ipv4(1), port: 1, txt: Self.txt(alice))
        #expect(core.takeEvents().count == 1, "found again once the daemon is back")
        core.stop()
        #expect(core.takeEvents().isEmpty)
    }

    /// The same advertiser seen by the embedded browser (on a virtual LAN) and by the system
    /// one (fed what Avahi resolves): the same found event, to the endpoint.
    @Test func bothEnginesReportTheSamePeer() throws {
        let lan = VirtualLAN(seed: 11)
        let (a, b) = (lan.addNode(), lan.addNode())
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice, port: 7123, info: ["room": "42"])
        try lan.browse(on: b, localIdentifier: Self.local)
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        var core = SystemBrowserCore(serviceType: Self.type, localIdentifier: Self.local)
        let key = Self.key(DiscoveryTXT.hex(alice.identifier), interface: 1)
        _ = core.serviceAdded(key, now: Self.start)
        core.resolved(key, address: a.address(on: 1), port: 7123, txt: Self.txt(alice, ["room": "42"]))
        #expect(core.takeEvents() == b.browserEvents)
    }
}

extension SystemServiceKey {
    func withDomain(_ domain: String) -> SystemServiceKey {
        SystemServiceKey(interfaceIndex: interfaceIndex, ipv6: ipv6, name: name, domain: domain)
    }
}

extension MDNSBrowserCore.Event {
    var identifier: Bytes16 {
        switch self {
        case .found(let found), .moved(let found): found.peer.identifier
        case .lost(let peer): peer.identifier
        }
    }
}
