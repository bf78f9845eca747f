import Foundation
import Testing

/// Advertisers and browsers in separate processes and network namespaces joined by a bridge:
/// real multicast on links the test made, never the machine's own network.
@Suite("Discovery across network namespaces", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct DiscoveryNamespaceTests {
    static let service = "mpc-test"

    /// Reads lines until one starts with `prefix`; fails the test at the deadline.
    static func line(_ demo: NamespacedDemo, startingWith prefix: String, within seconds: Double) async -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            guard let line = await demo.nextLine(within: deadline.timeIntervalSinceNow) else { return nil }
            if line.hasPrefix(prefix) { return line }
        }
        return nil
    }

    /// The 1 s figures are the protocol's, held to exactly on a virtual clock by
    /// DiscoveryCoreTests; here, with real processes on a loaded machine, the check is that the
    /// right mechanism works: found by the first queries, lost by the goodbye (the liveness
    /// timeout is a minute, so it cannot be what reports the loss).
    @Test func foundAtOnceAndLostByTheGoodbye() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0", "room=42", "colour=blue"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let identifier = advertising.split(separator: " ")[1]
        let port = advertising.split(separator: " ")[2]
        // Probing and announcing take about a second; a browser started then finds it at once.
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_LIVENESS_SECONDS": "60"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        let browsingSince = Date()
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        // The first query goes out after 20-120 ms; the next one only after a second.
        #expect(Date().timeIntervalSince(browsingSince) < 3, "found after \(Date().timeIntervalSince(browsingSince)) s")
        let fields = found.split(separator: " ")
        #expect(fields.count == 5)
        #expect(fields[1] == identifier && fields[2] == "Alice" && fields[3] == "colour=blue,room=42")
        #expect(fields[4].hasSuffix(":\(port)") && fields[4].hasPrefix("169.254."))

        advertiser.send("stop")
        let stoppedAt = Date()
        let lost = try #require(await Self.line(browser, startingWith: "LOST", within: 10))
        #expect(lost == "LOST \(identifier)")
        #expect(Date().timeIntervalSince(stoppedAt) < 10, "lost after \(Date().timeIntervalSince(stoppedAt)) s")
        // Exactly one FOUND and one LOST: nothing else was printed for this peer.
        try? browser.input.fileHandleForWriting.close()
        var rest: [String] = []
        while let line = await browser.nextLine(within: 10) { rest.append(line) }
        #expect(!rest.contains { $0.hasPrefix("FOUND") || $0.hasPrefix("LOST") }, "\(rest)")
    }

    /// SIGKILL: no goodbye. The browser notices by its liveness check (3 s here); without it the
    /// records would last their TTL, two minutes. (Exact timing: DiscoveryCoreTests.)
    @Test func aKilledAdvertiserIsLostWithinTheLivenessTimeout() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_LIVENESS_SECONDS": "3"])
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Bob", Self.service, "mp0"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let identifier = advertising.split(separator: " ")[1]
        _ = try #require(await Self.line(browser, startingWith: "FOUND \(identifier)", within: 10))
        advertiser.kill()
        let killedAt = Date()
        let lost = try #require(await Self.line(browser, startingWith: "LOST", within: 10))
        #expect(lost == "LOST \(identifier)")
        let waited = Date().timeIntervalSince(killedAt)
        #expect(waited >= 2 && waited < 10, "lost after \(waited) s")
    }

    /// Three processes in three namespaces, each advertising and browsing: all find each other.
    @Test func threePeersInThreeNamespacesFindEachOther() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        var identifiers: [Substring] = []
        var advertisers: [NamespacedDemo] = []
        for (index, namespace) in namespaces.names.enumerated() {
            let advertiser = try NamespacedDemo(in: namespace, ["advertise", "peer\(index)", Self.service, "mp0"])
            let line = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
            identifiers.append(line.split(separator: " ")[1])
            advertisers.append(advertiser)
        }
        for namespace in namespaces.names {
            let browser = try NamespacedDemo(in: namespace, ["browse", Self.service, "mp0"])
            _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 20))
            var found = Set<Substring>()
            while found.count < 3, let line = await Self.line(browser, startingWith: "FOUND", within: 10) {
                found.insert(line.split(separator: " ")[1])
            }
            // A browser also sees the advertiser in its own namespace (a different peer ID).
            #expect(found == Set(identifiers), "in \(namespace): \(found)")
        }
        withExtendedLifetime(advertisers) {}
    }

    // MARK: Interop with python-zeroconf, an independent mDNS stack

    static var zeroconfScript: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scripts/zeroconf_peer.py").path
    }

    /// python-zeroconf's browser sees our advertiser, with the TXT record of §12.2.
    @Test func zeroconfFindsOurAdvertiser() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0", "room=42"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let browser = try NamespacedDemo(
            in: namespaces.names[1], program: "python3",
            [Self.zeroconfScript, "browse", Self.service, namespaces.address(of: 1)])
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        let fields = found.split(separator: " ")
        #expect(fields.count == 4)
        #expect(fields[1] == "\(identifier)._\(Self.service)._tcp.local.")
        #expect(fields[2] == port)
        #expect(fields[3] == "mpcdn=Alice,mpcid=\(identifier),room=42,txtvers=1")
    }

    /// Our browser finds a peer that python-zeroconf publishes as §12 says, and loses it on its goodbye.
    @Test func ourBrowserFindsAZeroconfPeer() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let identifier = "00112233445566778899aabbccddeeff"
        let publisher = try NamespacedDemo(
            in: namespaces.names[0], program: "python3",
            [Self.zeroconfScript, "register", "Zed", Self.service, namespaces.address(of: 0), identifier, "7777"])
        _ = try #require(await Self.line(publisher, startingWith: "REGISTERED", within: 10))
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_LIVENESS_SECONDS": "60"])
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        #expect(found == "FOUND \(identifier) Zed from=zeroconf \(namespaces.address(of: 0)):7777")
        try publisher.input.fileHandleForWriting.close()  // unregisters: goodbye
        let lost = try #require(await Self.line(browser, startingWith: "LOST", within: 10))
        #expect(lost == "LOST \(identifier)")
    }

    // MARK: Interop with Avahi, the Linux desktop's mDNS stack (a private daemon per namespace)

    static var avahiScript: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scripts/avahi_peer.sh").path
    }

    /// `avahi-browse -rp` lists our advertiser, resolved, with the TXT record of §12.2.
    @Test func avahiBrowseListsOurAdvertiser() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0", "room=42"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        let avahi = try NamespacedDemo(in: namespaces.names[1], program: "bash", [Self.avahiScript, "browse", Self.service])
        let resolved = try #require(await Self.line(avahi, startingWith: "=;", within: 20))
        let fields = resolved.split(separator: ";", omittingEmptySubsequences: false)
        #expect(fields.count == 10, "\(resolved)")
        guard fields.count == 10 else { return }
        #expect(fields[3] == identifier && fields[4] == "_\(Self.service)._tcp")
        #expect(fields[6] == "mpc-\(identifier)-\(Self.service).local" && fields[7] == Substring(namespaces.address(of: 0)) && fields[8] == port)
        for pair in ["\"txtvers=1\"", "\"mpcid=\(identifier)\"", "\"mpcdn=Alice\"", "\"room=42\""] {
            #expect(fields[9].contains(pair), "\(fields[9]) lacks \(pair)")
        }
    }

    /// Our browser finds a peer published with `avahi-publish` as §12 says, and loses it when
    /// Avahi withdraws it.
    @Test func ourBrowserFindsAnAvahiPeer() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let identifier = "0123456789abcdef0123456789abcdef"
        let avahi = try NamespacedDemo(
            in: namespaces.names[0], program: "bash",
            [Self.avahiScript, "publish", identifier, Self.service, "4243", "txtvers=1", "mpcid=\(identifier)", "mpcdn=Avahi", "from=avahi"])
        _ = try #require(await Self.line(avahi, startingWith: "PUBLISHED", within: 20))
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_LIVENESS_SECONDS": "60"])
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        let fields = found.split(separator: " ")
        #expect(fields.count == 5)
        #expect(fields[1] == Substring(identifier) && fields[2] == "Avahi" && fields[3] == "from=avahi")
        #expect(fields[4].split(separator: ",").contains("\(namespaces.address(of: 0)):4243"))
        try avahi.input.fileHandleForWriting.close()  // avahi-publish ends: Avahi sends goodbyes
        let lost = try #require(await Self.line(browser, startingWith: "LOST", within: 10))
        #expect(lost == "LOST \(identifier)")
    }
}
