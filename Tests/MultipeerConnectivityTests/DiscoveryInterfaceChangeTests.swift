import Foundation
import Testing

/// Both engines follow interfaces that come and go while they run (both advertisers list them
/// again every 2 s; the system browser leaves that to avahi-daemon), across network namespaces
/// the test made.
@Suite("Discovery while interfaces come and go", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct DiscoveryInterfaceChangeTests {
    static let service = DiscoveryNamespaceTests.service

    static func line(_ demo: NamespacedDemo, startingWith prefix: String, within seconds: Double) async -> String? {
        await DiscoveryNamespaceTests.line(demo, startingWith: prefix, within: seconds)
    }

    /// The browser listens on a link of its own (bridge br1) that the advertiser is not on: it
    /// finds the advertiser only once a veth onto br1 is added to the running advertiser, loses
    /// it when that veth is deleted, and finds it again when one is added back.
    @Test(arguments: [(ipv4: true, ipv6: false), (ipv4: false, ipv6: true)])
    func aRunningAdvertiserAnnouncesOnAnAddedInterface(families: (ipv4: Bool, ipv6: Bool)) async throws {
        let namespaces = try NetworkNamespaces(count: 2, ipv4: families.ipv4, ipv6: families.ipv6)
        defer { namespaces.remove() }
        try namespaces.addBridge("br1")
        try namespaces.addLink(to: 1, number: 1, bridge: "br1")
        // mp1 does not exist yet in the advertiser's namespace.
        let advertiser = try NamespacedDemo(
            in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0,mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let browser = try NamespacedDemo(
            in: namespaces.names[1], ["browse", Self.service, "mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "3"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 3) == nil, "heard over a link the advertiser is not on")

        let expected = families.ipv4 ? "\(namespaces.address(of: 0, link: 1)):\(port)" : "[\(namespaces.ipv6Address(of: 0, link: 1))%mp1]:\(port)"
        for round in 0..<2 {
            try namespaces.addLink(to: 0, number: 1, bridge: "br1")
            let found = await Self.line(browser, startingWith: "FOUND", within: 10)
            #expect(found == "FOUND \(identifier) Alice - \(expected)", "round \(round)")
            try namespaces.removeLink(from: 0, number: 1)
            // Gone with its interface, so no goodbye: lost by the browser's liveness check.
            #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)", "round \(round)")
        }
        withExtendedLifetime(advertiser) {}
    }

    /// The system engine's browser, configured for `mp0,mp1` by name and started while its
    /// namespace has only mp0, finds an advertiser on the other link once mp1 is added (the
    /// daemon, allowed both, starts using it), loses it when mp1 is deleted (the daemon drops
    /// what it heard there), and finds it again when mp1 is back under a new index.
    @Test func theSystemBrowserFollowsAnAddedInterface() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        try namespaces.addBridge("br1")
        try namespaces.addLink(to: 0, number: 1, bridge: "br1")
        let advertiser = try NamespacedDemo(
            in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let (daemon, bus) = try await DiscoverySystemEngineTests.daemon(in: namespaces.names[1], interfaces: "mp0,mp1")
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0,mp1"], environment: DiscoverySystemEngineTests.system(bus))
        #expect(await Self.line(browser, startingWith: "ENGINE", within: 10) == "ENGINE system")
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 3) == nil, "heard over a link the browser is not on")

        for round in 0..<2 {
            try namespaces.addLink(to: 1, number: 1, bridge: "br1")
            let found = await Self.line(browser, startingWith: "FOUND", within: 15)
            #expect(found == "FOUND \(identifier) Alice - \(namespaces.address(of: 0, link: 1)):\(port)", "round \(round)")
            try namespaces.removeLink(from: 1, number: 1)
            #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)", "round \(round)")
        }
        // Everything it printed since ADVERTISING is still queued: no rename among it.
        #expect(await Self.line(advertiser, startingWith: "RENAMED", within: 1) == nil)
        withExtendedLifetime((advertiser, daemon)) {}
    }

    /// The system engine's advertiser, configured for `mp0,mp1` with its own daemon allowed both
    /// and started while its namespace has only mp0, publishes on mp1 once it is added (an
    /// embedded browser on br1 finds it at mp1's address, under the same instance), and its
    /// records there go with mp1 (lost by the browser's liveness check); twice, mp1 coming back
    /// under a new index.
    @Test func theSystemAdvertiserFollowsAnAddedInterface() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        try namespaces.addBridge("br1")
        try namespaces.addLink(to: 1, number: 1, bridge: "br1")
        let (daemon, bus) = try await DiscoverySystemEngineTests.daemon(in: namespaces.names[0], interfaces: "mp0,mp1")
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0,mp1"], environment: DiscoverySystemEngineTests.system(bus))
        #expect(await Self.line(advertiser, startingWith: "ENGINE", within: 10) == "ENGINE system")
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let browser = try NamespacedDemo(
            in: namespaces.names[1], ["browse", Self.service, "mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "3"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 3) == nil, "heard over a link the advertiser is not on")

        for round in 0..<2 {
            try namespaces.addLink(to: 0, number: 1, bridge: "br1")
            let found = await Self.line(browser, startingWith: "FOUND", within: 15)
            // The instance label is the identifier: published on mp1 under the names held, not renamed.
            #expect(found == "FOUND \(identifier) Alice - \(namespaces.address(of: 0, link: 1)):\(port)", "round \(round)")
            try namespaces.removeLink(from: 0, number: 1)
            #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)", "round \(round)")
        }
        // Everything it printed since ADVERTISING is still queued: no rename among it.
        #expect(await Self.line(advertiser, startingWith: "RENAMED", within: 1) == nil)
        withExtendedLifetime((advertiser, daemon)) {}
    }
}
