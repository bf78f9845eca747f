import Foundation
import MultipeerTestSupport
import Testing

/// `multipeer chat` as people use it: each peer in a tmux pane of its own, in a network
/// namespace of its own on a shared bridge, driven with keys and read from the screen.
@Suite("multipeer chat in tmux", .serialized, .enabled(if: NetworkNamespaces.available && Tmux.available))
struct TerminalAppChatProcessTests {
    static let certificates = repositoryRootURL.appendingPathComponent("Certificates")

    /// `multipeer chat` in namespace `index`, with `name`'s test identity.
    static func chat(_ namespaces: NetworkNamespaces, _ index: Int, _ name: String, directory: URL, service: String, trustCA: Bool) throws -> [String] {
        var command = [
            "/usr/sbin/ip", "netns", "exec", namespaces.names[index], try BuiltProducts.executable("multipeer").path, "chat",
            "--interface", "mp0", "--service", service, "--dir", directory.path,
            "--identity", certificates.appendingPathComponent("peers/\(name).p12").path,
            "--password-file", certificates.appendingPathComponent("password.txt").path,
        ]
        if trustCA { command += ["--trust-ca", certificates.appendingPathComponent("ca/ca.pem").path] }
        return command
    }

    static func temporaryDirectory(_ label: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("mp-\(label)-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// The 6-digit code in the pane's trust question.
    static func pairingCode(in screen: String, askingAbout peer: String) -> String? {
        let pattern = try! Regex("accept \(peer)\\? Only if \(peer)'s screen shows the same pairing code ([0-9]{3} [0-9]{3})")
        return screen.firstMatch(of: pattern).map { String($0.output[1].substring ?? "") }
    }

    /// Percentages of the progress bar for `label` on the pane's last line.
    static func percentage(on screen: String, label: String) -> Int? {
        let last = screen.split(separator: "\n").last.map(String.init) ?? ""
        let pattern = try! Regex("\(label) \\[[#-]+\\] ([0-9]+)%")
        return last.firstMatch(of: pattern).flatMap { Int($0.output[1].substring ?? "") }
    }

    @Test func twoPeopleFindInviteCompareCodesChatAndSendAFile() throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let (aliceFiles, bobFiles) = (try Self.temporaryDirectory("alice"), try Self.temporaryDirectory("bob"))
        defer { for url in [aliceFiles, bobFiles] { try? FileManager.default.removeItem(at: url) } }
        let tmux = Tmux()
        let alice = try tmux.start(Self.chat(namespaces, 0, "alice", directory: aliceFiles, service: "mp-chat2", trustCA: false))
        let bob = try tmux.start(Self.chat(namespaces, 1, "bob", directory: bobFiles, service: "mp-chat2", trustCA: false))

        try tmux.waitFor(alice, showing: "you are alice: CN=alice")
        try tmux.waitFor(alice, showing: "1 bob (found)")
        try tmux.waitFor(bob, showing: "1 alice (found)")
        try tmux.type(alice, "/invite 1")
        try tmux.waitFor(bob, showing: "alice invites you")
        try tmux.type(bob, "y")

        // Both screens show the other's certificate and the same pairing code before anyone accepts.
        let aliceScreen = try tmux.waitFor(alice, within: 20, "the trust question") { Self.pairingCode(in: $0, askingAbout: "bob") != nil }
        let bobScreen = try tmux.waitFor(bob, within: 20, "the trust question") { Self.pairingCode(in: $0, askingAbout: "alice") != nil }
        let code = try #require(Self.pairingCode(in: aliceScreen, askingAbout: "bob"))
        #expect(Self.pairingCode(in: bobScreen, askingAbout: "alice") == code)
        #expect(aliceScreen.contains("bob is CN=bob, issued by CN=swift-multipeer Test Intermediate CA (not verified), SHA-256 "))
        #expect(bobScreen.contains("alice is CN=alice, issued by CN=swift-multipeer Test Intermediate CA (not verified), SHA-256 "))
        try tmux.type(alice, "y")
        try tmux.type(bob, "y")
        try tmux.waitFor(alice, showing: "* bob joined (1 connected)")
        try tmux.waitFor(bob, showing: "* alice joined (1 connected)")

        try tmux.type(alice, "hello from alice")
        try tmux.waitFor(bob, showing: "[alice] hello from alice")
        try tmux.type(bob, "hello from bob")
        try tmux.waitFor(alice, showing: "[bob] hello from bob")

        // A file large enough (in a debug build) for the bars to be seen moving on both screens.
        let content = Data(seededContent(96 << 20, seed: 7))
        let file = bobFiles.appendingPathComponent("payload.bin")
        try content.write(to: file)
        try tmux.type(bob, "/send \(file.path)")
        var receiving: Set<Int> = []
        var sending: Set<Int> = []
        let done = try tmux.waitFor(alice, within: 120, "the received file") { screen in
            if let percent = Self.percentage(on: screen, label: "payload.bin < bob") { receiving.insert(percent) }
            if let percent = try? Self.percentage(on: tmux.screen(bob), label: "payload.bin > alice") { sending.insert(percent) }
            return screen.contains("received payload.bin from bob, saved as ")
        }
        #expect(receiving.filter { $0 < 100 }.count >= 2, "receiver's bar showed \(receiving.sorted())")
        #expect(sending.filter { $0 < 100 }.count >= 2, "sender's bar showed \(sending.sorted())")
        #expect(done.contains(aliceFiles.appendingPathComponent("payload.bin").path))
        try tmux.waitFor(bob, showing: "sent payload.bin > alice")
        #expect(try Data(contentsOf: aliceFiles.appendingPathComponent("payload.bin")) == content)

        // Ctrl-C: bob says goodbye, so alice sees him leave at once (well before dead-peer detection).
        try tmux.press(bob, "C-c")
        try tmux.waitFor(bob, showing: "interrupted: left the chat")
        try tmux.waitFor(bob, showing: "[exited 0]")
        try tmux.waitFor(alice, within: 5, showing: "* bob left")
        try tmux.type(alice, "/quit")
        try tmux.waitFor(alice, showing: "[exited 0]")
    }

    @Test func threePeopleInOneChatWithCertificatesFromTheirCA() throws {
        let namespaces = try NetworkNamespaces(count: 3)
        let directory = try Self.temporaryDirectory("three")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tmux = Tmux()
        let names = ["alice", "bob", "carol"]
        let panes = try names.enumerated().map { index, name in
            try tmux.start(Self.chat(namespaces, index, name, directory: directory, service: "mp-chat3", trustCA: true))
        }
        let (alice, bob, carol) = (panes[0], panes[1], panes[2])
        try tmux.waitFor(alice, showing: "bob (found)")
        try tmux.waitFor(alice, showing: "carol (found)")
        try tmux.type(alice, "/invite bob")
        try tmux.waitFor(bob, showing: "alice invites you")
        try tmux.type(bob, "y")
        try tmux.waitFor(alice, showing: "* bob joined (1 connected)")
        try tmux.type(alice, "/invite carol")
        try tmux.waitFor(carol, showing: "alice invites you")
        try tmux.type(carol, "y")

        // Carol joined alice's session, and met bob through it: everyone is connected to everyone,
        // each connection checked against the CA without a question.
        try tmux.waitFor(alice, showing: "(2 connected)")
        try tmux.waitFor(bob, showing: "(2 connected)")
        try tmux.waitFor(carol, showing: "(2 connected)")
        try tmux.waitFor(carol, showing: "bob's certificate verifies to the trusted CA")
        try tmux.waitFor(bob, showing: "carol's certificate verifies to the trusted CA")

        try tmux.type(alice, "hi both")
        try tmux.waitFor(bob, showing: "[alice] hi both")
        try tmux.waitFor(carol, showing: "[alice] hi both")
        try tmux.type(carol, "carol here")
        try tmux.waitFor(alice, showing: "[carol] carol here")
        try tmux.waitFor(bob, showing: "[carol] carol here")

        try tmux.type(bob, "/quit")
        try tmux.waitFor(bob, showing: "[exited 0]")
        try tmux.waitFor(alice, within: 5, showing: "* bob left")
        try tmux.waitFor(carol, within: 5, showing: "* bob left")
        for pane in [alice, carol] { try tmux.type(pane, "/quit") }
        for pane in [alice, carol] { try tmux.waitFor(pane, showing: "[exited 0]") }
    }
}
