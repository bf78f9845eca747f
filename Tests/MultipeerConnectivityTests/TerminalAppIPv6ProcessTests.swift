import Foundation
import MultipeerTestSupport
import Testing

/// Peers that have nothing but IPv6 link-local addresses: the invitation goes to the address
/// discovery found (with its interface), and the session connection that follows uses the
/// acceptor's link-local endpoint on the same link (docs/PROTOCOL.md §9.2).
@Suite("multipeer over IPv6 link-local only", .serialized, .enabled(if: NetworkNamespaces.available))
struct TerminalAppIPv6ProcessTests {
    @Test func aFileCrossesALinkWithOnlyIPv6LinkLocalAddresses() async throws {
        let namespaces = try NetworkNamespaces(count: 2, ipv4: false, ipv6: true)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-ipv6-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        let inbox = directory.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: inbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (file, content) = try TerminalAppScriptProcessTests.file(directory, "v6.bin", size: 2 << 20, seed: 6)
        let peer = TerminalAppScriptProcessTests.peer
        let trustCA = TerminalAppScriptProcessTests.trustCA
        let receiver = try TerminalAppScriptProcessTests.start(
            namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "60"] + peer("bob", "mp-v6") + trustCA)
        _ = await TerminalAppScriptProcessTests.read(receiver, until: "waiting for files as bob")
        let sent = try await TerminalAppScriptProcessTests.run(namespaces, 0, ["send", file.path, "--to", "bob"] + peer("alice", "mp-v6") + trustCA)
        #expect(sent.status == 0, "\(sent.output)")
        #expect(await TerminalAppScriptProcessTests.read(receiver, until: "received v6.bin from alice") != nil)
        #expect(await TerminalAppScriptProcessTests.exitStatus(receiver) == 0)
        #expect(try Data(contentsOf: inbox.appendingPathComponent("v6.bin")) == content)
    }
}
