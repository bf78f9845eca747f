import Foundation
import Testing

/// The system engine against a real avahi-daemon: each namespace that needs one gets a private
/// D-Bus bus and daemon (Tests/Scripts/avahi_peer.sh `daemon`), and our programs there reach it
/// through DBUS_SYSTEM_BUS_ADDRESS. Everything stays on links the test made.
@Suite("Discovery's system engine (avahi-daemon) across network namespaces", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct DiscoverySystemEngineTests {
    static let service = DiscoveryNamespaceTests.service
    static var script: String { DiscoveryNamespaceTests.avahiScript }

    static func line(_ program: NamespacedDemo, startingWith prefix: String, within seconds: Double) async -> String? {
        await DiscoveryNamespaceTests.line(program, startingWith: prefix, within: seconds)
    }

    /// A private bus and avahi-daemon in `namespace` (using `interfaces`, even those added
    /// later); the environment that points our programs at it.
    static func daemon(in namespace: String, interfaces: String = "mp0") async throws -> (NamespacedDemo, [String: String]) {
        let daemon = try NamespacedDemo(in: namespace, program: "bash", [script, "daemon"], environment: ["AVAHI_INTERFACES": interfaces])
        let ready = try #require(await line(daemon, startingWith: "DAEMON ", within: 20))
        return (daemon, ["DBUS_SYSTEM_BUS_ADDRESS": String(ready.dropFirst("DAEMON ".count))])
    }

    /// Whether a multipeer-demo process in `namespace` holds a UDP socket on port 5353.
    static func demoHoldsPort5353(in namespace: String) throws -> Bool {
        try NetworkNamespaces.ip("netns", "exec", namespace, "ss", "-lunpH", "sport = :5353").contains("\"multipeer-demo\"")
    }

    static func system(_ environment: [String: String]) -> [String: String] {
        environment.merging(["MULTIPEER_DISCOVERY_ENGINE": "system"]) { $1 }
    }

    /// Our advertiser publishes through avahi-daemon what §12 says: avahi-browse (another host's
    /// Avahi) resolves it, our embedded browser finds it, and both see it go when it stops.
    @Test func ourSystemAdvertiserIsSeenByAvahiAndByOurEmbeddedBrowser() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let (daemon, environment) = try await Self.daemon(in: namespaces.names[0])
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0", "room=42"], environment: Self.system(environment))
        #expect(await Self.line(advertiser, startingWith: "ENGINE", within: 10) == "ENGINE system")
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (identifier, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])
        #expect(try !Self.demoHoldsPort5353(in: namespaces.names[0]), "the system engine opens no mDNS socket of its own")

        let avahi = try NamespacedDemo(in: namespaces.names[1], program: "bash", [Self.script, "browse", Self.service])
        let resolved = try #require(await Self.line(avahi, startingWith: "=;", within: 20))
        let fields = resolved.split(separator: ";", omittingEmptySubsequences: false)
        #expect(fields.count == 10, "\(resolved)")
        if fields.count == 10 {
            #expect(fields[3] == identifier && fields[4] == "_\(Self.service)._tcp")
            #expect(fields[6] == "mpc-\(identifier)-\(Self.service).local" && fields[7] == Substring(namespaces.address(of: 0)) && fields[8] == port)
            // avahi-browse prints the strings last to first: on the wire they are in §12.2's order, and nothing else.
            #expect(fields[9] == "\"room=42\" \"mpcdn=Alice\" \"mpcid=\(identifier)\" \"txtvers=1\"")
        }
        let browser = try NamespacedDemo(
            in: namespaces.names[2], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "60"])
        let found = try #require(await Self.line(browser, startingWith: "FOUND", within: 10))
        #expect(found == "FOUND \(identifier) Alice room=42 \(namespaces.address(of: 0)):\(port)")

        advertiser.send("stop")
        let lost = try #require(await Self.line(browser, startingWith: "LOST", within: 10))
        #expect(lost == "LOST \(identifier)")
        let removed = try #require(await Self.line(avahi, startingWith: "-;", within: 10))
        #expect(removed.split(separator: ";")[3] == identifier)
        withExtendedLifetime(daemon) {}
    }

    /// Our browser, through avahi-daemon, finds a service `avahi-publish` publishes and our
    /// embedded advertiser: each once, with its TXT and address; each lost once when it goes.
    @Test func ourSystemBrowserFindsAvahiPublishAndOurEmbeddedAdvertiser() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let (daemon, environment) = try await Self.daemon(in: namespaces.names[1])
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: Self.system(environment))
        #expect(await Self.line(browser, startingWith: "ENGINE", within: 10) == "ENGINE system")
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        #expect(try !Self.demoHoldsPort5353(in: namespaces.names[1]))

        let avahiIdentifier = "0123456789abcdef0123456789abcdef"
        let publisher = try NamespacedDemo(
            in: namespaces.names[0], program: "bash",
            [Self.script, "publish", avahiIdentifier, Self.service, "4243", "txtvers=1", "mpcid=\(avahiIdentifier)", "mpcdn=Avahi", "from=avahi"])
        _ = try #require(await Self.line(publisher, startingWith: "PUBLISHED", within: 20))
        let advertiser = try NamespacedDemo(
            in: namespaces.names[2], ["advertise", "Bob", Self.service, "mp0", "colour=blue"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let advertising = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10))
        let (bob, port) = (advertising.split(separator: " ")[1], advertising.split(separator: " ")[2])

        var found: [String] = []
        while found.count < 2, let line = await Self.line(browser, startingWith: "FOUND", within: 15) { found.append(line) }
        #expect(found.sorted() == [
            "FOUND \(avahiIdentifier) Avahi from=avahi \(namespaces.address(of: 0)):4243",
            "FOUND \(bob) Bob colour=blue \(namespaces.address(of: 2)):\(port)",
        ].sorted())

        try publisher.input.fileHandleForWriting.close()  // avahi-publish ends: its daemon sends goodbyes
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(avahiIdentifier)")
        advertiser.send("stop")
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(bob)")
        // Exactly one FOUND and one LOST each.
        try? browser.input.fileHandleForWriting.close()
        var rest: [String] = []
        while let line = await browser.nextLine(within: 10) { rest.append(line) }
        #expect(!rest.contains { $0.hasPrefix("FOUND") || $0.hasPrefix("LOST") }, "\(rest)")
        withExtendedLifetime(daemon) {}
    }

    /// `automatic` takes the system engine where the daemon answers and the embedded one where
    /// there is no bus; `system` without a daemon refuses to start. The two engines find each other.
    @Test func automaticPicksTheSystemEngineOnlyWhereTheDaemonAnswers() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (daemon, environment) = try await Self.daemon(in: namespaces.names[0])
        let noBus = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/\(UUID().uuidString)"]
        let automatic = ["MULTIPEER_DISCOVERY_ENGINE": "automatic"]

        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0"], environment: environment.merging(automatic) { $1 })
        #expect(await Self.line(advertiser, startingWith: "ENGINE", within: 10) == "ENGINE system")
        let identifier = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10)).split(separator: " ")[1]
        #expect(try !Self.demoHoldsPort5353(in: namespaces.names[0]))

        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: noBus.merging(automatic) { $1 })
        #expect(await Self.line(browser, startingWith: "ENGINE", within: 10) == "ENGINE embedded")
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        #expect(try Self.demoHoldsPort5353(in: namespaces.names[1]))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 10)?.hasPrefix("FOUND \(identifier) Alice") == true)

        let refused = try NamespacedDemo(in: namespaces.names[1], ["advertise", "Carol", Self.service, "mp0"], environment: Self.system(noBus))
        var lines: [String] = []
        while let line = await refused.nextLine(within: 10) { lines.append(line) }
        #expect(lines.isEmpty, "nothing advertised: \(lines)")
        refused.finish()
        #expect(refused.process.terminationStatus != 0)
        withExtendedLifetime(daemon) {}
    }

    /// When avahi-daemon goes away our system browser loses what it found (it can no longer see
    /// it), and when a daemon is back it finds it again, without a restart.
    @Test func theSystemBrowserFollowsTheDaemonAwayAndBack() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (daemon, environment) = try await Self.daemon(in: namespaces.names[1])
        let browser = try NamespacedDemo(in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: Self.system(environment))
        _ = try #require(await Self.line(browser, startingWith: "BROWSING", within: 10))
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded"])
        let identifier = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10)).split(separator: " ")[1]
        _ = try #require(await Self.line(browser, startingWith: "FOUND \(identifier)", within: 10))

        daemon.send("kill")
        _ = try #require(await Self.line(daemon, startingWith: "KILLED", within: 10))
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)")
        daemon.send("start")
        _ = try #require(await Self.line(daemon, startingWith: "STARTED", within: 20))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 15)?.hasPrefix("FOUND \(identifier) Alice") == true)
        withExtendedLifetime(advertiser) {}
    }

    /// When avahi-daemon dies (no goodbye) our system advertiser's records go with it, and once
    /// a daemon is back the advertiser publishes them again by itself.
    @Test func theSystemAdvertiserPublishesAgainWhenTheDaemonIsBack() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (daemon, environment) = try await Self.daemon(in: namespaces.names[0])
        let advertiser = try NamespacedDemo(in: namespaces.names[0], ["advertise", "Alice", Self.service, "mp0"], environment: Self.system(environment))
        let identifier = try #require(await Self.line(advertiser, startingWith: "ADVERTISING", within: 10)).split(separator: " ")[1]
        // The liveness check (3 s) notices a responder that stopped answering.
        let browser = try NamespacedDemo(
            in: namespaces.names[1], ["browse", Self.service, "mp0"], environment: ["MULTIPEER_DISCOVERY_ENGINE": "embedded", "MULTIPEER_LIVENESS_SECONDS": "3"])
        _ = try #require(await Self.line(browser, startingWith: "FOUND \(identifier)", within: 10))

        daemon.send("kill")
        _ = try #require(await Self.line(daemon, startingWith: "KILLED", within: 10))
        #expect(await Self.line(browser, startingWith: "LOST", within: 10) == "LOST \(identifier)")
        daemon.send("start")
        _ = try #require(await Self.line(daemon, startingWith: "STARTED", within: 20))
        #expect(await Self.line(browser, startingWith: "FOUND", within: 15)?.hasPrefix("FOUND \(identifier) Alice") == true)
        withExtendedLifetime(advertiser) {}
    }
}
