import Foundation
import MultipeerTestSupport
import Testing

/// `multipeer send` and `multipeer receive` as scripts run them, in two network namespaces on a
/// bridge: the transfer, and the exit status and message of every way it can fail.
@Suite("multipeer send and receive", .serialized, .enabled(if: NetworkNamespaces.available))
struct TerminalAppScriptProcessTests {
    static let certificates = repositoryRootURL.appendingPathComponent("Certificates")

    /// The arguments that make `name` (a test identity), on mp0, with service `service`.
    static func peer(_ name: String, _ service: String) -> [String] {
        [
            "--interface", "mp0", "--service", service,
            "--identity", certificates.appendingPathComponent("peers/\(name).p12").path,
            "--password-file", certificates.appendingPathComponent("password.txt").path,
        ]
    }

    static let trustCA = ["--trust-ca", certificates.appendingPathComponent("ca/ca.pem").path]

    /// Runs `multipeer ARGUMENTS` in namespace `index` to completion.
    static func run(_ namespaces: NetworkNamespaces, _ index: Int, _ arguments: [String], seconds: Double = 90) async throws -> (status: Int32, output: String) {
        try await BuiltProducts.run(
            URL(fileURLWithPath: "/usr/sbin/ip"),
            ["netns", "exec", namespaces.names[index], try BuiltProducts.executable("multipeer").path] + arguments, seconds: seconds)
    }

    /// Starts `multipeer ARGUMENTS` in namespace `index`, its lines read as they come.
    static func start(_ namespaces: NetworkNamespaces, _ index: Int, _ arguments: [String]) throws -> NamespacedDemo {
        try NamespacedDemo(in: namespaces.names[index], program: try BuiltProducts.executable("multipeer").path, arguments, standardErrorToo: true)
    }

    /// Reads `program`'s lines until one contains `text`; everything read, or nil after `seconds`.
    static func read(_ program: NamespacedDemo, until text: String, within seconds: Double = 20) async -> String? {
        var seen = ""
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline, let line = await program.nextLine(within: deadline.timeIntervalSinceNow) {
            seen += line + "\n"
            if line.contains(text) { return seen }
        }
        Issue.record("no \"\(text)\" within \(seconds) s; read:\n\(seen)")
        return nil
    }

    static func exitStatus(_ program: NamespacedDemo, within seconds: Double = 20) async -> Int32? {
        let process = program.process
        return try? await withDeadline(seconds: seconds) {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    process.waitUntilExit()
                    continuation.resume(returning: process.terminationStatus)
                }
            }
        }
    }

    static func file(_ directory: URL, _ name: String, size: Int, seed: UInt64) throws -> (URL, Data) {
        let content = Data(seededContent(size, seed: seed))
        let url = directory.appendingPathComponent(name)
        try content.write(to: url)
        return (url, content)
    }

    @Test func sendAndReceiveAndEveryFailure() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-scripts-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        let inbox = directory.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: inbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (small, smallContent) = try Self.file(directory, "notes.txt", size: 300_000, seed: 1)

        // Success: the receiver trusts the sender by its CA and vice versa; the file arrives whole.
        do {
            let receiver = try Self.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "60"] + Self.peer("bob", "mp-ok") + Self.trustCA)
            _ = await Self.read(receiver, until: "waiting for files as bob")
            let sent = try await Self.run(namespaces, 0, ["send", small.path, "--to", "bob"] + Self.peer("alice", "mp-ok") + Self.trustCA)
            #expect(sent.status == 0, "\(sent.output)")
            #expect(sent.output.contains("bob's certificate verifies to the trusted CA"), "\(sent.output)")
            #expect(sent.output.contains("sent notes.txt > bob"), "\(sent.output)")
            let received = await Self.read(receiver, until: "received notes.txt from alice, saved as \(inbox.path)/notes.txt")
            #expect(received != nil)
            #expect(await Self.exitStatus(receiver) == 0)
            #expect(try Data(contentsOf: inbox.appendingPathComponent("notes.txt")) == smallContent)
        }

        // 3: nobody of that name; nothing arrives.
        let missing = try await Self.run(namespaces, 0, ["send", small.path, "--to", "nobody", "--timeout", "2"] + Self.peer("alice", "mp-none") + Self.trustCA)
        #expect(missing.status == 3, "\(missing.output)")
        #expect(missing.output.contains("no peer named nobody found within 2 s"), "\(missing.output)")
        let idle = try await Self.run(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "2"] + Self.peer("bob", "mp-none") + Self.trustCA)
        #expect(idle.status == 3, "\(idle.output)")
        #expect(idle.output.contains("no file arrived in time"), "\(idle.output)")

        // 4: a chat with nobody at its terminal declines invitations.
        do {
            let chat = try Self.start(namespaces, 1, ["chat", "--dir", inbox.path] + Self.peer("bob", "mp-decline") + Self.trustCA)
            _ = await Self.read(chat, until: "looking for peers")
            let declined = try await Self.run(namespaces, 0, ["send", small.path, "--to", "bob", "--timeout", "20"] + Self.peer("alice", "mp-decline") + Self.trustCA)
            #expect(declined.status == 4, "\(declined.output)")
            #expect(declined.output.contains("bob declined the invitation"), "\(declined.output)")
            chat.finish()
        }

        // 6: this side does not trust the peer (mallory's CA is not ours)...
        do {
            let mallory = try Self.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "30", "--trust-any"] + Self.peer("mallory", "mp-distrust"))
            _ = await Self.read(mallory, until: "waiting for files")
            let refused = try await Self.run(namespaces, 0, ["send", small.path, "--to", "mallory"] + Self.peer("alice", "mp-distrust") + Self.trustCA)
            #expect(refused.status == 6, "\(refused.output)")
            #expect(refused.output.contains("rejected mallory: its certificate does not verify"), "\(refused.output)")
            #expect(refused.output.contains("you did not trust mallory"), "\(refused.output)")
            mallory.kill()
        }
        // ... and the peer does not trust this side; the receiver reports it when its time runs out.
        do {
            let bob = try Self.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "20"] + Self.peer("bob", "mp-distrusted") + Self.trustCA)
            _ = await Self.read(bob, until: "waiting for files")
            let refused = try await Self.run(namespaces, 0, ["send", small.path, "--to", "bob", "--trust-any"] + Self.peer("mallory", "mp-distrusted"))
            #expect(refused.status == 6, "\(refused.output)")
            #expect(refused.output.contains("bob did not trust this peer"), "\(refused.output)")
            #expect(await Self.read(bob, until: "you did not trust mallory", within: 30) != nil)
            #expect(await Self.exitStatus(bob, within: 30) == 6)
        }

        // 7: the receiver dies mid-transfer (its plain progress lines show the transfer running).
        do {
            let (large, _) = try Self.file(directory, "large.bin", size: 256 << 20, seed: 2)
            let receiver = try Self.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "60"] + Self.peer("bob", "mp-cut") + Self.trustCA)
            _ = await Self.read(receiver, until: "waiting for files")
            let sender = try Self.start(namespaces, 0, ["send", large.path, "--to", "bob"] + Self.peer("alice", "mp-cut") + Self.trustCA)
            let progress = await Self.read(receiver, until: "progress large.bin < alice ", within: 60)
            #expect(progress != nil)
            receiver.kill()
            let failed = await Self.read(sender, until: "the transfer failed", within: 30)
            #expect(failed != nil)
            #expect(await Self.exitStatus(sender) == 7)
        }

        // 2: what cannot even start.
        let unreadable = try await Self.run(namespaces, 0, ["send", directory.appendingPathComponent("absent").path, "--to", "bob"] + Self.peer("alice", "mp-setup"))
        #expect(unreadable.status == 2, "\(unreadable.output)")
        #expect(unreadable.output.contains("cannot read"), "\(unreadable.output)")
        let wrongPassword = directory.appendingPathComponent("wrong-password")
        try Data("not the password\n".utf8).write(to: wrongPassword)
        let locked = try await Self.run(namespaces, 0, [
            "receive", "--interface", "mp0", "--identity", Self.certificates.appendingPathComponent("peers/bob.p12").path,
            "--password-file", wrongPassword.path,
        ])
        #expect(locked.status == 2, "\(locked.output)")
        #expect(locked.output.contains("cannot open the identity"), "\(locked.output)")
        let usage = try await Self.run(namespaces, 0, ["send", small.path])
        #expect(usage.status == 64, "\(usage.output)")
        let unaskable = try await Self.run(namespaces, 0, ["send", small.path, "--to", "bob"] + Self.peer("alice", "mp-setup"))
        #expect(unaskable.status == 2, "\(unaskable.output)")
        #expect(unaskable.output.contains("no terminal to ask about peers: pass --trust-ca or --trust-any"), "\(unaskable.output)")
    }

    /// A person who never answers: the sender gives up after its timeout with status 5.
    @Test(.enabled(if: Tmux.available)) func anInvitationNobodyAnswersTimesOut() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-noanswer-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (file, _) = try Self.file(directory, "unanswered.txt", size: 1000, seed: 3)
        let tmux = Tmux()
        let bob = try tmux.start(
            ["/usr/sbin/ip", "netns", "exec", namespaces.names[1], try BuiltProducts.executable("multipeer").path, "chat", "--dir", directory.path]
                + Self.peer("bob", "mp-noanswer") + Self.trustCA)
        try tmux.waitFor(bob, showing: "looking for peers")
        let sent = try await Self.run(namespaces, 0, ["send", file.path, "--to", "bob", "--timeout", "4"] + Self.peer("alice", "mp-noanswer") + Self.trustCA)
        #expect(sent.status == 5, "\(sent.output)")
        #expect(sent.output.contains("bob did not answer within 4 s"), "\(sent.output)")
        #expect(try tmux.screen(bob).contains("alice invites you"))
    }

    /// Names, file names and texts from peers cannot drive the terminal: escape sequences and
    /// invisible characters are shown as escapes, and a file name cannot choose where it lands.
    @Test func textFromPeersIsShownInert() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-inert-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        let inbox = directory.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: inbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (file, content) = try Self.file(directory, "a\u{1B}[2Jb\u{200B}.txt", size: 1000, seed: 4)
        let hostile = "bo\u{200B}b\u{1B}[2J"
        let receiver = try Self.start(
            namespaces, 1, ["receive", "--name", hostile, "--dir", inbox.path, "--timeout", "60", "--trust-any"] + Self.peer("bob", "mp-inert"))
        _ = await Self.read(receiver, until: "waiting for files")
        let sent = try await Self.run(namespaces, 0, ["send", file.path, "--to", hostile, "--trust-any"] + Self.peer("alice", "mp-inert"))
        #expect(sent.status == 0, "\(sent.output)")
        #expect(!sent.output.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x200B }, "\(sent.output.debugDescription)")
        #expect(sent.output.contains("bo\\u{200b}b\\u{1b}[2J"), "\(sent.output)")
        let received = try #require(await Self.read(receiver, until: "received a"))
        #expect(!received.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x200B }, "\(received.debugDescription)")
        #expect(await Self.exitStatus(receiver) == 0)
        // Stored under a plain name in the inbox: the escape byte replaced, nothing outside.
        let stored = try FileManager.default.contentsOfDirectory(atPath: inbox.path)
        #expect(stored == ["a_[2Jb\u{200B}.txt"], "\(stored)")
        #expect(try Data(contentsOf: inbox.appendingPathComponent(stored.first ?? "")) == content)
    }

    /// A person answers the trust question `send` asks on a terminal.
    @Test(.enabled(if: Tmux.available)) func sendAsksAboutThePeerOnATerminal() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-ask-\(getpid())-\(UInt32.random(in: 0 ... .max))")
        let inbox = directory.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: inbox, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (file, content) = try Self.file(directory, "asked.txt", size: 5000, seed: 5)
        let receiver = try Self.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "60", "--trust-any"] + Self.peer("bob", "mp-ask"))
        _ = await Self.read(receiver, until: "waiting for files")
        let tmux = Tmux()
        let sender = try tmux.start(
            ["/usr/sbin/ip", "netns", "exec", namespaces.names[0], try BuiltProducts.executable("multipeer").path, "send", file.path, "--to", "bob"]
                + Self.peer("alice", "mp-ask"))
        try tmux.waitFor(sender, showing: "accept bob? Only if bob's screen shows the same pairing code")
        try tmux.type(sender, "maybe")
        try tmux.type(sender, "y")
        try tmux.waitFor(sender, showing: "[exited 0]")
        #expect(try tmux.screen(sender).contains("sent asked.txt > bob"))
        #expect(await Self.exitStatus(receiver) == 0)
        #expect(try Data(contentsOf: inbox.appendingPathComponent("asked.txt")) == content)
    }
}
