import Foundation
import Testing

/// The embedded engine over IPv6 (docs/PROTOCOL.md §12.1: AAAA records, link-local included,
/// sent over IPv6 to ff02::fb), across network namespaces the test made.
@Suite("Discovery over IPv6 across network namespaces", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct DiscoveryIPv6Tests {
    static let service = DiscoveryNamespaceTests.service

    static func line(_ demo: NamespacedDemo, startingWith prefix: String, within seconds: Double) async -> String? {
        await DiscoveryNamespaceTests.line(demo, startingWith: prefix, within: seconds)
    }

    /// FOUND and LOST lines the browser prints after its input closes, within `seconds`.
    static func remainingEvents(_ browser: NamespacedDemo, within seconds: Double) async -> [String] {
        try? browser.input.fileHandleForWriting.close()
        var rest: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, let line = await browser.nextLine(within: deadline.timeIntervalSinceNow) { rest.append(line) }
        return rest.filter { $0.hasPrefix("FOUND") || $0.hasPrefix("LOST") }
    }

    /// Only IPv6 link-local addresses, no IPv4 at all: found with its discoveryInfo at its
    /// link-local address and interface, lost by its goodbye.
    @Test func peersWithOnlyIPv6LinkLocalFindEachOther() async throws {
        let namespaces = try NetworkNamespaces(count: 2, ipv4: false, ipv6: true)
        defer { namespaces.remove() }
        let advertiser = try NamespacedDemo(
            in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0", "room=42", "colour=blue"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let browser = try NamespacedDemo(
            in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "60"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        #expect(found == "FOUND \(identifier) Alice colour=blue,room=42 [\(namespaces.ipv6Address(of: 0))%mp0]:\(port)")

        advertiser.send("stop")
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)")
        let rest = await Self.remainingEvents(browser, within: 10)
        #expect(rest.isEmpty, "\(rest)")
    }

    /// Both families on two interfaces each: the browser hears the peer four ways and reports
    /// it found once and lost once, at addresses of the advertiser's own.
    @Test func aPeerOnBothFamiliesAndTwoInterfacesIsFoundAndLostOnce() async throws {
        let namespaces = try NetworkNamespaces(count: 2, ipv4: true, ipv6: true)
        defer { namespaces.remove() }
        for index in 0..<2 { try namespaces.addLink(to: index, number: 1) }
        let advertiser = try NamespacedDemo(
            in: namespaces.names[0], ["advertise", "Bob", Self.service, "mp0,mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        // The advertiser listens on both families.
        let sockets = try NetworkNamespaces.ip("netns", "exec", namespaces.names[0], "ss", "-lunpH", "sport = :5353")
        #expect(sockets.contains("0.0.0.0:5353") && sockets.contains("[::]:5353"), "\(sockets)")

        let browser = try NamespacedDemo(
            in: namespaces.names[1], ["browse", Self.service, "mp0,mp1"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "60"])
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        let fields = found.split(separator: " ")
        #expect(fields.count == 5 && fields[1] == identifier && fields[2] == "Bob")
        // One bridge joins all four interfaces: the browser may hear either address on either interface.
        let own = Set((0..<2).flatMap { link in
            ["\(namespaces.address(of: 0, link: link)):\(port)"] + (0..<2).map { "[\(namespaces.ipv6Address(of: 0, link: link))%mp\($0)]:\(port)" }
        })
        let endpoints = fields.count == 5 ? fields[4].split(separator: ",").map(String.init) : []
        #expect(!endpoints.isEmpty && endpoints.allSatisfy(own.contains), "\(endpoints) not within \(own)")

        // Both families and both interfaces keep answering: nothing more is reported while it advertises.
        try await Task.sleep(for: .seconds(3))
        advertiser.send("stop")
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)")
        let rest = await Self.remainingEvents(browser, within: 10)
        #expect(rest.isEmpty, "\(rest)")
    }
}
