import Foundation
import Testing

/// RFC 6762 §11 with real sockets: an advertiser in one namespace, a querier in another on the
/// same link, holding a second address from another subnet that the advertiser reaches only
/// through a route. Sent straight to the advertiser, that address's queries are off-link; sent
/// to the group, on-link. Traffic stays on the links the test made.
@Suite(
    "Discovery ignores queriers off the link", .serialized,
    .enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "needs root, iproute2 and python3"))
struct DiscoveryOffLinkTests {
    static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scripts/legacy_query.py").path
    }

    /// TEST-NET-2 (RFC 5737): never on any real network.
    static let offLinkSubnet = "198.51.100"

    /// A legacy unicast query from 198.51.100.2 gets no answer, while the same query sent after
    /// it from the querier's on-link address is answered (the script says why that ordering is
    /// the evidence). Without the on-link rule both are answered: the route makes the reply deliverable.
    @Test func aLegacyQueryFromAnotherSubnetGetsNoAnswer() async throws {
        let (onLink, offLink) = try await Self.query(toGroup: false)
        #expect(onLink != "ON 0", "the on-link control query was never answered")
        #expect(offLink == "OFF 0", "the off-link querier was answered: \(offLink)")
    }

    /// The same queries sent to 224.0.0.251 are link-scope: both are answered, the one from
    /// 198.51.100.2 too (RFC 6762 §11). This is the shell telling the core what the packet was sent to.
    @Test func aLegacyQueryToTheGroupFromAnotherSubnetIsAnswered() async throws {
        let (onLink, offLink) = try await Self.query(toGroup: true)
        #expect(onLink != "ON 0", "the on-link query was never answered")
        #expect(offLink != "OFF 0", "the query to the group from another subnet was not answered")
    }

    /// Runs the script against an advertiser; its `ON` and `OFF` lines.
    static func query(toGroup: Bool) async throws -> (onLink: String, offLink: String) {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (advertiserSpace, querierSpace) = (namespaces.names[0], namespaces.names[1])
        try NetworkNamespaces.ip("netns", "exec", querierSpace, "ip", "addr", "add", "\(Self.offLinkSubnet).2/24", "dev", "mp0")
        try NetworkNamespaces.ip(
            "netns", "exec", advertiserSpace, "ip", "route", "add", "\(Self.offLinkSubnet).0/24", "via", namespaces.address(of: 1), "dev", "mp0")

        let advertiser = try NamespacedDemo(in: advertiserSpace, ["advertise", "Alice", DiscoveryNamespaceTests.service, "mp0"])
        _ = try #require(await DiscoveryNamespaceTests.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let querier = try NamespacedDemo(
            in: querierSpace, program: "python3",
            [Self.script, namespaces.address(of: 0), "\(Self.offLinkSubnet).2", namespaces.address(of: 1), "_\(DiscoveryNamespaceTests.service)._tcp.local", "15"]
                + (toGroup ? ["group"] : []))
        let onLink = try #require(await DiscoveryNamespaceTests.line(querier, startingWith: "ON ", within: 20))
        let offLink = try #require(await DiscoveryNamespaceTests.line(querier, startingWith: "OFF ", within: 5))
        return (onLink, offLink)
    }
}
