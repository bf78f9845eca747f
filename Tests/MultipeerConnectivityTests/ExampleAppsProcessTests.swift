import Foundation
import MultipeerTestSupport
import Testing

/// The apps in Examples/, each run as several processes, one per network namespace, joined by a
/// bridge the test made: they find each other over real multicast that never reaches the
/// machine's own network, connect, and do what they are for. Their output is the evidence.
@Suite("Example apps across network namespaces", .serialized, .enabled(if: NetworkNamespaces.available, "needs root and iproute2"))
struct ExampleAppsProcessTests {
    /// Each app gives up by itself after this many seconds (and exits 2); the test kills it later.
    static let appTimeout = 60

    /// One app's run: its exit status and the lines it printed.
    struct Run: CustomStringConvertible {
        let name: String
        let status: Int32
        let lines: [String]

        var description: String { "\(name) exited \(status):\n" + lines.joined(separator: "\n") }

        func lines(startingWith prefix: String) -> [String] { lines.filter { $0.hasPrefix(prefix + " ") } }

        /// The fields after `prefix` of each line that starts with it.
        func fields(_ prefix: String) -> [[String]] {
            lines(startingWith: prefix).map { $0.split(separator: " ").dropFirst().map(String.init) }
        }
    }

    /// Runs `example` in each namespace with the arguments given for it, all at once, to the end.
    /// Without a system bus: discovery runs on the embedded engine, on the namespace's link, even
    /// on a machine whose avahi-daemon would publish on the real network.
    static func runTogether(
        _ example: String, _ runs: [(name: String, namespace: String, arguments: [String])], timeout: Int = appTimeout
    ) async throws -> [Run] {
        let program = try BuiltProducts.executable(example).path
        let ip = URL(fileURLWithPath: "/usr/sbin/ip")
        let noBus = "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/\(UUID().uuidString)"
        return try await withThrowingTaskGroup(of: Run.self) { group in
            for run in runs {
                group.addTask {
                    let arguments = ["netns", "exec", run.namespace, "/usr/bin/env", noBus, program] + run.arguments + ["--timeout", "\(timeout)"]
                    let (status, output) = try await BuiltProducts.run(ip, arguments, seconds: Double(timeout + 30))
                    return Run(name: run.name, status: status, lines: output.split(separator: "\n").map(String.init))
                }
            }
            var results: [Run] = []
            for try await result in group { results.append(result) }
            return runs.map { run in results.first { $0.name == run.name }! }
        }
    }

    /// Three peers, five messages each: every message of every other peer arrives on each, in
    /// order, and each leaves only when all have everything.
    @Test func groupChatOfThree() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let names = ["alice", "bob", "carol"]
        let started = ContinuousClock.now
        let runs = try await Self.runTogether(
            "group-chat",
            names.enumerated().map { index, name in
                (name, namespaces.names[index], ["--name", name, "--peers", "3", "--messages", "5"])
            })
        for run in runs {
            #expect(run.status == 0, "\(run)")
            let others = names.filter { $0 != run.name }
            let expected = others.flatMap { other in (1...5).map { "RECEIVED \(other) \($0) hello-\($0)-from-\(other)" } }
            let received = run.lines(startingWith: "RECEIVED")
            #expect(received.sorted() == expected.sorted(), "\(run)")
            // `.reliable` keeps each sender's order.
            for other in others {
                #expect(received.filter { $0.hasPrefix("RECEIVED \(other) ") } == expected.filter { $0.hasPrefix("RECEIVED \(other) ") })
            }
            #expect(run.lines.filter { $0.hasPrefix("DONE") } == ["DONE 10 messages from 2 peers"], "\(run)")
            #expect(run.lines(startingWith: "GROUP") == ["GROUP alice,bob,carol"], "\(run)")
        }
        print("group chat of three: \(ContinuousClock.now - started)")
    }

    /// Three players count to 21: all agree on one host, the one with the largest hash each
    /// printed (the hash is the same in every process), and see the same moves and winner.
    @Test func turnGameOfThree() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let names = ["north", "east", "south"]
        let started = ContinuousClock.now
        let runs = try await Self.runTogether(
            "turn-game",
            names.enumerated().map { index, name in
                (name, namespaces.names[index], ["--name", name, "--players", "3", "--target", "21"])
            })
        for run in runs { #expect(run.status == 0, "\(run)") }

        let hashes = try runs.map { run in
            let me = try #require(run.fields("ME").first, "\(run)")
            #expect(me.first == run.name)
            return (name: run.name, hash: try #require(Int(me[1])))
        }
        let expectedHost = hashes.max { $0.hash < $1.hash }!.name
        for run in runs { #expect(run.fields("HOST") == [[expectedHost]], "\(run)") }

        let moves = runs.map { $0.lines(startingWith: "MOVE") }
        #expect(moves.allSatisfy { $0 == moves[0] }, "\(runs)")
        let parsed = moves[0].map { $0.split(separator: " ") }.map { (player: String($0[1]), count: Int($0[2])!, total: Int($0[3])!) }
        #expect(parsed.map(\.count).reduce(0, +) == 21)
        #expect(parsed.last?.total == 21)
        #expect(parsed.allSatisfy { (1...3).contains($0.count) })
        // The host deals the turns round the table, largest hash first.
        let order = hashes.sorted { $0.hash > $1.hash }.map(\.name)
        #expect(parsed.enumerated().allSatisfy { $1.player == order[$0 % order.count] }, "\(parsed) in order \(order)")
        let winner = try #require(parsed.last?.player)
        for run in runs {
            #expect(run.fields("WINNER") == [[winner]], "\(run)")
            #expect(run.lines.filter { $0.hasPrefix("DONE") } == ["DONE"], "\(run)")
        }
        print("turn game of three: \(ContinuousClock.now - started), host \(expectedHost), winner \(winner), \(parsed.count) moves")
    }

    /// One sender, two receivers: the file arrives byte for byte in each receiver's folder, the
    /// sender's polled `Progress` climbs to 1, and each receiver confirms the checksum.
    @Test func fileShareToTwoReceivers() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("file-share-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let content = Data(seededContent(16 << 20, seed: 30))
        let file = directory.appendingPathComponent("holiday photos.bin")
        try content.write(to: file)
        let receivers = ["bob", "carol"]
        let started = ContinuousClock.now
        let runs = try await Self.runTogether(
            "file-share",
            [("alice", namespaces.names[0], ["send", "--name", "alice", "--file", file.path, "--receivers", "2"])]
                + receivers.enumerated().map { index, name in
                    (name, namespaces.names[index + 1], ["receive", "--name", name, "--output", directory.appendingPathComponent(name).path])
                })
        for run in runs { #expect(run.status == 0, "\(run)") }
        let sender = runs[0]
        for receiver in receivers {
            let copy = try Data(contentsOf: directory.appendingPathComponent(receiver).appendingPathComponent("holiday photos.bin"))
            #expect(copy == content, "\(receiver)'s copy differs: \(copy.count) bytes")
            #expect(sender.fields("SENT").contains([receiver]), "\(sender)")
            #expect(sender.fields("CONFIRMED").contains { $0.first == receiver }, "\(sender)")
            let fractions = sender.fields("PROGRESS").filter { $0.first == receiver }.compactMap { Double($0[1]) }
            #expect(fractions.last == 1, "\(fractions)")
            #expect(zip(fractions, fractions.dropFirst()).allSatisfy { $0 <= $1 }, "\(fractions)")
            #expect(fractions.contains { $0 > 0 && $0 < 1 }, "no fraction between 0 and 1 was seen: \(fractions)")
        }
        #expect(sender.lines.filter { $0.hasPrefix("DONE") } == ["DONE"], "\(sender)")
        for run in runs.dropFirst() {
            #expect(run.fields("VERIFIED").first?.last == sender.fields("CONFIRMED").first?.last, "\(run)")
            #expect(run.lines.filter { $0.hasPrefix("DONE") } == ["DONE"], "\(run)")
        }
        print("file share to two receivers: \(ContinuousClock.now - started)")
    }

    /// The name of a received file is the peer's word: ".." must neither climb out of the
    /// output folder nor remove anything there; a name already taken gets a number.
    @Test func aReceivedFileNamedDotDotStaysInTheOutputFolder() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("file-share-\(UUID().uuidString)")
        let output = directory.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keep = directory.appendingPathComponent("keep.txt")
        try Data("mine".utf8).write(to: keep)
        try Data("earlier".utf8).write(to: output.appendingPathComponent("received"))
        let content = Data(seededContent(100_000, seed: 31))
        let file = directory.appendingPathComponent("payload.bin")
        try content.write(to: file)
        let runs = try await Self.runTogether(
            "file-share",
            [
                ("alice", namespaces.names[0], ["send", "--name", "alice", "--file", file.path, "--as", "..", "--receivers", "1"]),
                ("bob", namespaces.names[1], ["receive", "--name", "bob", "--output", output.path]),
            ])
        for run in runs { #expect(run.status == 0, "\(run)") }
        #expect(runs[1].fields("STORED") == [["received-2"]], "\(runs[1])")
        #expect(try Data(contentsOf: output.appendingPathComponent("received-2")) == content)
        #expect(try Data(contentsOf: output.appendingPathComponent("received")) == Data("earlier".utf8))
        #expect(try Data(contentsOf: keep) == Data("mine".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["inbox", "keep.txt", "payload.bin"])
    }

    /// Alone, each app waits for its peers only as long as it was told, then says so and exits 2.
    @Test func eachAppGivesUpAtItsTimeLimit() async throws {
        let namespaces = try NetworkNamespaces(count: 3)
        defer { namespaces.remove() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("file-share-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let started = ContinuousClock.now
        async let chat = Self.runTogether("group-chat", [("alice", namespaces.names[0], ["--name", "alice", "--peers", "2", "--messages", "1"])], timeout: 2)
        async let game = Self.runTogether("turn-game", [("north", namespaces.names[1], ["--name", "north", "--players", "2"])], timeout: 2)
        async let share = Self.runTogether("file-share", [("bob", namespaces.names[2], ["receive", "--name", "bob", "--output", directory.path])], timeout: 2)
        let runs = try await chat + game + share
        let waited = ContinuousClock.now - started
        for run in runs {
            #expect(run.status == 2, "\(run)")
            #expect(run.lines.last?.hasPrefix("TIMEOUT") == true, "\(run)")
        }
        #expect(waited >= .seconds(2) && waited < .seconds(20), "\(waited)")
    }
}
