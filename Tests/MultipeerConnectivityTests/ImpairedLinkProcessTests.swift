import Foundation
import MultipeerTestSupport
import Testing

/// `multipeer send` and `receive` across a bridge between two network namespaces whose links
/// lose packets (nftables random drops inside each namespace; this kernel has no netem) or are
/// cut for a while: files arrive byte-identical, or the transfer fails with a clear status within
/// the dead-peer deadline.
@Suite("Impaired links", .serialized, .enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft")))
struct ImpairedLinkProcessTests {
    typealias Apps = TerminalAppScriptProcessTests

    /// Drops `percent` % of what namespace `name` sends on mp0, at random (100: the link is cut).
    static func impair(_ name: String, losing percent: Int) throws {
        _ = try? NetworkNamespaces.ip(["netns", "exec", name, "nft", "delete", "table", "inet", "impair"])
        guard percent > 0 else { return }
        let nft = { (arguments: [String]) throws in _ = try NetworkNamespaces.ip(["netns", "exec", name, "nft"] + arguments) }
        try nft(["add", "table", "inet", "impair"])
        try nft(["add", "chain", "inet", "impair", "out", "{ type filter hook output priority 0; }"])
        if percent >= 100 {
            try nft(["add", "rule", "inet", "impair", "out", "oifname", "mp0", "drop"])
        } else {
            try nft(["add", "rule", "inet", "impair", "out", "oifname", "mp0", "numgen", "random", "mod", "100", "<", "\(percent)", "drop"])
        }
    }

    static func scratch(_ label: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("mp-\(label)-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        try FileManager.default.createDirectory(at: url.appendingPathComponent("inbox"), withIntermediateDirectories: true)
        return url
    }

    @Test(arguments: [1, 5, 20])
    func aFileCrossesALossyLink(percent: Int) async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = try Self.scratch("loss\(percent)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let inbox = directory.appendingPathComponent("inbox")
        let (file, content) = try Apps.file(directory, "lossy.bin", size: 4 << 20, seed: UInt64(percent))
        for name in namespaces.names { try Self.impair(name, losing: percent) }
        let service = "mp-loss\(percent)"
        let receiver = try Apps.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "90"] + Apps.peer("bob", service) + Apps.trustCA)
        _ = await Apps.read(receiver, until: "waiting for files")
        let sent = try await Apps.run(namespaces, 0, ["send", file.path, "--to", "bob", "--timeout", "60"] + Apps.peer("alice", service) + Apps.trustCA, seconds: 120)
        #expect(sent.status == 0, "\(percent) % loss: \(sent.output)")
        #expect(await Apps.exitStatus(receiver, within: 30) == 0)
        #expect(try Data(contentsOf: inbox.appendingPathComponent("lossy.bin")) == content)
    }

    @Test func aShortCutIsRiddenOutAndALongOneEndsTheTransferWithinTheDeadline() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = try Self.scratch("cut")
        defer { try? FileManager.default.removeItem(at: directory) }
        let inbox = directory.appendingPathComponent("inbox")
        let (file, content) = try Apps.file(directory, "cut.bin", size: 192 << 20, seed: 11)

        // Cut for 3 s mid-transfer (less than the 9 s dead-peer deadline): TCP carries on after.
        let receiver = try Apps.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "120"] + Apps.peer("bob", "mp-cut1") + Apps.trustCA)
        _ = await Apps.read(receiver, until: "waiting for files")
        let sender = try Apps.start(namespaces, 0, ["send", file.path, "--to", "bob"] + Apps.peer("alice", "mp-cut1") + Apps.trustCA)
        try #require(await Apps.read(receiver, until: "progress cut.bin < alice ", within: 60) != nil)
        for name in namespaces.names { try Self.impair(name, losing: 100) }
        try await Task.sleep(for: .seconds(3))  // the scenario: how long the link is down
        for name in namespaces.names { try Self.impair(name, losing: 0) }
        #expect(await Apps.read(sender, until: "sent cut.bin > bob", within: 90) != nil)
        #expect(await Apps.exitStatus(sender, within: 30) == 0)
        #expect(await Apps.exitStatus(receiver, within: 30) == 0)
        #expect(try Data(contentsOf: inbox.appendingPathComponent("cut.bin")) == content)

        // Cut for good: the sender gives up with status 7 once the peer is dead (9 s of silence).
        let second = try Apps.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "120"] + Apps.peer("bob", "mp-cut2") + Apps.trustCA)
        _ = await Apps.read(second, until: "waiting for files")
        let doomed = try Apps.start(namespaces, 0, ["send", file.path, "--to", "bob"] + Apps.peer("alice", "mp-cut2") + Apps.trustCA)
        try #require(await Apps.read(second, until: "progress cut.bin < alice ", within: 60) != nil)
        for name in namespaces.names { try Self.impair(name, losing: 100) }
        let cutAt = ContinuousClock.now
        #expect(await Apps.read(doomed, until: "the transfer failed", within: 30) != nil)
        let elapsed = ContinuousClock.now - cutAt
        #expect(await Apps.exitStatus(doomed, within: 10) == 7)
        #expect(elapsed < .seconds(20), "the sender took \(elapsed) to give up")
        second.kill()
    }
}
