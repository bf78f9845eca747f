import Foundation
import MultipeerTestSupport
import Testing

/// Link recovery over real sockets (docs/PROTOCOL.md §7.9): two Apple-style peers in two network
/// namespaces chat while one of them moves to another address and loses all its traffic for a
/// few seconds. Every message arrives once and in order, and neither app hears of the gap.
@Suite("Link recovery across namespaces", .serialized, .enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft")))
struct LinkRecoveryProcessTests {
    /// Drops everything namespace `name` sends or receives on mp0 (nothing: `cut` false).
    static func cut(_ name: String, _ cut: Bool) throws {
        _ = try? NetworkNamespaces.ip(["netns", "exec", name, "nft", "delete", "table", "inet", "blackout"])
        guard cut else { return }
        let nft = { (arguments: [String]) throws in _ = try NetworkNamespaces.ip(["netns", "exec", name, "nft"] + arguments) }
        try nft(["add", "table", "inet", "blackout"])
        try nft(["add", "chain", "inet", "blackout", "out", "{ type filter hook output priority 0; }"])
        try nft(["add", "chain", "inet", "blackout", "in", "{ type filter hook input priority 0; }"])
        try nft(["add", "rule", "inet", "blackout", "out", "oifname", "mp0", "drop"])
        try nft(["add", "rule", "inet", "blackout", "in", "iifname", "mp0", "drop"])
    }

    /// Two chatters, one per namespace, connected and told to start: `count` messages each way,
    /// one every 50 ms.
    /// `keepingLogs`: each side's log (info and up) is kept, for a failure to show.
    static func startChat(
        in namespaces: NetworkNamespaces, count: Int, environment: [String: String] = [:], keepingLogs: Bool = false
    ) async throws -> (NamespacedDemo, NamespacedDemo) {
        let environment = keepingLogs ? environment.merging(["MULTIPEER_SOAK_LOG": "1"]) { $1 } : environment
        let first = try NamespacedDemo(
            in: namespaces.names[0], ["chatter", "first", "\(count)", "50"], environment: environment, keepingStandardError: keepingLogs)
        let second = try NamespacedDemo(
            in: namespaces.names[1], ["chatter", "second", "\(count)", "50"], environment: environment, keepingStandardError: keepingLogs)
        let firstPeer = try #require(await first.nextLine(within: 30))
        let secondPeer = try #require(await second.nextLine(within: 30))
        #expect(firstPeer.hasPrefix("PEER ") && secondPeer.hasPrefix("PEER "))
        first.send(secondPeer)
        second.send(firstPeer)
        let data = try #require(await first.nextLine(within: 30))
        #expect(data.hasPrefix("DATA "))
        second.send(data)
        #expect(await first.nextLine(within: 30) == "CONNECTED")
        #expect(await second.nextLine(within: 30) == "CONNECTED")
        first.send("GO")
        second.send("GO")
        return (first, second)
    }

    /// Moves the second namespace's peer to a new address (the old one first: deleting a subnet's
    /// first address deletes the others in it).
    static func moveSecond(in namespaces: NetworkNamespaces) throws { try move(1, in: namespaces) }

    static func move(_ index: Int, in namespaces: NetworkNamespaces) throws {
        let moved = namespaces.names[index]
        let oldAddress = namespaces.address(of: index)
        let newAddress = "169.254.\(oldAddress.split(separator: ".")[2]).\(200 + index)"
        try NetworkNamespaces.ip("netns", "exec", moved, "ip", "addr", "del", "\(oldAddress)/24", "dev", "mp0")
        try NetworkNamespaces.ip("netns", "exec", moved, "ip", "addr", "add", "\(newAddress)/24", "dev", "mp0")
    }

    /// The issue's own scenario: 200 messages each way, one every 50 ms; 3 s in, the second peer
    /// gets a new address and its traffic is dropped for 4 s.
    @Test func aChatSurvivesAnAddressChangeAndFourSecondsOfSilence() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (first, second) = try await Self.startChat(in: namespaces, count: 200)
        defer {
            first.kill()
            second.kill()
        }

        // The script of the scenario, not evidence of anything: the outcome is read below.
        try await Task.sleep(for: .seconds(3))
        try Self.cut(namespaces.names[1], true)
        try Self.moveSecond(in: namespaces)
        try await Task.sleep(for: .seconds(4))
        try Self.cut(namespaces.names[1], false)

        var outcomes: [String] = []
        for side in [first, second] {
            var other: [String] = []
            while let line = await side.nextLine(within: 60) {
                if line.hasPrefix("DONE ") {
                    outcomes.append(line)
                    break
                }
                if line != "INTERRUPTED" && line != "RESTORED" { other.append(line) }
            }
            #expect(other.isEmpty, "\(other)")
        }
        #expect(outcomes == Array(repeating: "DONE received=200 inorder=yes duplicates=0 notconnected=0", count: 2))
        first.send("QUIT")
        second.send("QUIT")
        first.finish()
        second.finish()
    }

    /// A peer whose address changes while its link is quiet notices at once (its address is
    /// gone), not at the 9 s dead-peer deadline, and redials from the new address: the other
    /// side's peers would otherwise spend most of their grace waiting for it.
    @Test func aPeerThatMovesNoticesAtOnceAndComesBack() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let (first, second) = try await Self.startChat(in: namespaces, count: 100)
        defer {
            first.kill()
            second.kill()
        }
        try await Task.sleep(for: .seconds(1))  // the script: some messages flow first
        try Self.moveSecond(in: namespaces)
        // Well inside the dead-peer deadline (9 s): the address watch, not the deadline.
        #expect(await second.nextLine(within: 3) == "INTERRUPTED")
        #expect(await second.nextLine(within: 5) == "RESTORED")
        for side in [first, second] {
            var done: String?
            while let line = await side.nextLine(within: 30) {
                if line.hasPrefix("DONE ") {
                    done = line
                    break
                }
            }
            #expect(done == "DONE received=100 inorder=yes duplicates=0 notconnected=0")
        }
        first.send("QUIT")
        second.send("QUIT")
        first.finish()
        second.finish()
    }

    /// Both peers move at once, and no third member is left to say where either went: each side's
    /// browser sees the other's new address (the advertisers announce it), and the session redials
    /// there. Without discovery's news each would dial the other's old address until the grace ran out.
    /// Discovery's news can take seconds on a loaded machine (the advertiser must see its own
    /// move and announce it): a 20 s grace keeps that from turning into a failure; the outcome,
    /// not the time, is what this test checks.
    @Test func twoPeersThatBothMoveFindEachOtherThroughDiscovery() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let service = "mp-moves"
        let (first, second) = try await Self.startChat(
            in: namespaces, count: 120, environment: ["MULTIPEER_CHATTER_DISCOVERY": service, "MULTIPEER_CHATTER_GRACE": "20"],
            keepingLogs: true)
        defer {
            first.kill()
            second.kill()
        }
        try await Task.sleep(for: .seconds(1))  // the script: some messages flow first
        try Self.move(0, in: namespaces)
        try Self.move(1, in: namespaces)
        for side in [first, second] {
            var done: String?
            var other: [String] = []
            while let line = await side.nextLine(within: 30) {
                if line.hasPrefix("DONE ") {
                    done = line
                    break
                }
                if line != "INTERRUPTED" && line != "RESTORED" { other.append(line) }
            }
            // Failed once in a full run under load (both sides notConnected after the grace),
            // never since: the logs say why next time.
            #expect(
                done == "DONE received=120 inorder=yes duplicates=0 notconnected=0",
                "\(other)\nfirst's log:\n\(first.standardErrorTail())\nsecond's log:\n\(second.standardErrorTail())")
        }
        first.send("QUIT")
        second.send("QUIT")
        first.finish()
        second.finish()
    }
}
