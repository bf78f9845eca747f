import Foundation
import MultipeerTestSupport
import Testing

/// A firewall that drops mDNS packets makes the sender's `sendmsg` fail (EPERM), and SwiftNIO
/// closes a UDP socket on such an error. Discovery must open its sockets again and go on once
/// packets pass, rather than stay deaf and mute for good.
@Suite("Discovery after a blackout", .serialized, .enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft")))
struct DiscoveryBlackoutTests {
    /// Drops every packet namespace `name` sends on mp0 (nftables, inside the namespace only).
    static func blackout(_ name: String) throws {
        try NetworkNamespaces.ip("netns", "exec", name, "nft", "add", "table", "inet", "blackout")
        try NetworkNamespaces.ip("netns", "exec", name, "nft", "add", "chain", "inet", "blackout", "out", "{ type filter hook output priority 0; }")
        try NetworkNamespaces.ip("netns", "exec", name, "nft", "add", "rule", "inet", "blackout", "out", "oifname", "mp0", "drop")
    }

    static func restore(_ name: String) throws {
        try NetworkNamespaces.ip("netns", "exec", name, "nft", "delete", "table", "inet", "blackout")
    }

    @Test func bothSidesFindEachOtherOnceTheirPacketsPassAgain() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        for name in namespaces.names { try Self.blackout(name) }
        let environment = ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "60"]
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", "mpc-blackout", "mp0"], environment: environment)
        let advertising = try #require(await DiscoveryNamespaceTests.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let identifier = advertising.split(separator: " ")[1]
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", "mpc-blackout", "mp0"], environment: environment)
        _ = try #require(await DiscoveryNamespaceTests.line(browser, startingWith: "BROWSING", within: 10))
        // Both have sent into the blackout (probes, announcements, the first queries) and had
        // their sockets closed by the failed sends; nothing could be found meanwhile.
        #expect(await DiscoveryNamespaceTests.line(browser, startingWith: "FOUND", within: 3) == nil)
        for name in namespaces.names { try Self.restore(name) }
        // The sockets come back within an interface check (2 s) and the browser's next query
        // (backing off from 1 s) is answered.
        let found = await DiscoveryNamespaceTests.line(browser, startingWith: "FOUND", within: 20)
        #expect(found?.hasPrefix("FOUND \(identifier) Alice") == true, "\(found ?? "nothing found")")
        advertiser.finish()
        browser.finish()
    }
}
