import Foundation
import Testing

/// Two advertisers that claim one peer identifier, in two namespaces on one link: the name
/// conflict of docs/PROTOCOL.md §12.1 for real, and how a browser reports them (§12.3).
@Suite("Discovery name conflicts across network namespaces", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct DiscoveryConflictTests {
    static let service = DiscoveryNamespaceTests.service

    static func line(_ demo: NamespacedDemo, startingWith prefix: String, within seconds: Double) async -> String? {
        await DiscoveryNamespaceTests.line(demo, startingWith: prefix, within: seconds)
    }

    /// Every line until one starts with `prefix` (included), or all seen by the deadline.
    static func lines(_ demo: NamespacedDemo, through prefix: String, within seconds: Double) async -> [String] {
        let deadline = Date().addingTimeInterval(seconds)
        var seen: [String] = []
        while Date() < deadline, let line = await demo.nextLine(within: deadline.timeIntervalSinceNow) {
            seen.append(line)
            if line.hasPrefix(prefix) { break }
        }
        return seen
    }

    /// An advertiser's lines from its start until it announced a name: its port and those lines.
    static func advertised(_ demo: NamespacedDemo) async -> (port: Substring?, lines: [String]) {
        var lines = await Self.lines(demo, through: "ADVERTISING", within: 20)
        if !lines.contains(where: { $0.hasPrefix("INSTANCE") }) { lines += await Self.lines(demo, through: "INSTANCE", within: 20) }
        let port = lines.first { $0.hasPrefix("ADVERTISING") }?.split(separator: " ")[2]
        return (port, lines)
    }

    /// The first advertiser keeps `hex(I)`; the second, probing that name while the first
    /// defends it, moves to `hex(I)-2`. A browser on the same link finds the peer once, with the
    /// first's data, reports nothing when the second appears or when the first leaves (the peer
    /// is still advertised), and loses it when the second leaves too. With `system` both
    /// advertisers publish through an avahi-daemon of their own namespace, which probes.
    @Test(arguments: ["embedded", "system"])
    func twoAdvertisersOfOnePeerAreRenamedAndFoundOnce(engine: String) async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let identifier = "00112233445566778899aabbccddeeff"
        var environments: [[String: String]] = []
        var daemons: [NamespacedDemo] = []
        for index in 0..<2 {
            var environment = ["MULTIPEER_DISCOVERY_ENGINE": engine, "MULTIPEER_PEER_IDENTIFIER": identifier]
            if engine == "system" {
                let (daemon, bus) = try await DiscoverySystemEngineTests.daemon(in: namespaces.names[index])
                daemons.append(daemon)
                environment.merge(bus) { $1 }
            }
            environments.append(environment)
        }
        let browser = try NamespacedDemo(
            in: namespaces.names[2], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "60"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))

        let first = try NamespacedDemo(in: namespaces.names[0], ["advertise", "First", Self.service, "mp0", "who=first"], environment: environments[0])
        let (firstPort, firstLines) = await Self.advertised(first)
        #expect(firstLines.contains("ENGINE \(engine)"), "\(firstLines)")
        #expect(firstLines.filter { $0.hasPrefix("INSTANCE") || $0.hasPrefix("RENAMED") } == ["INSTANCE \(identifier)"], "\(firstLines)")
        let port = try #require(firstPort)
        let found = await Self.line(browser, startingWith: "FOUND", within: 10)
        #expect(found == "FOUND \(identifier) First who=first \(namespaces.address(of: 0)):\(port)")

        let second = try NamespacedDemo(in: namespaces.names[1], ["advertise", "Second", Self.service, "mp0", "who=second"], environment: environments[1])
        let (_, secondLines) = await Self.advertised(second)
        #expect(secondLines.filter { $0.hasPrefix("INSTANCE") || $0.hasPrefix("RENAMED") } == ["RENAMED \(identifier)-2", "INSTANCE \(identifier)-2"], "\(secondLines)")
        // The second is the same peer: nothing new to report.
        #expect(await Self.line(browser, startingWith: "", within: 3) == nil)

        first.send("stop")
        let firstRest = await Self.lines(first, through: "STOPPED", within: 10)
        #expect(firstRest.last == "STOPPED" && !firstRest.contains { $0.hasPrefix("RENAMED") }, "the first kept its name: \(firstRest)")
        // The peer is still advertised, as `hex(I)-2`: not lost.
        #expect(await Self.line(browser, startingWith: "", within: 3) == nil)

        second.send("stop")
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)")
        withExtendedLifetime(daemons) {}
    }
}
