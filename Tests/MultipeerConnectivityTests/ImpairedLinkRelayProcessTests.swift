import Foundation
import MultipeerTestSupport
import Testing

/// `multipeer send` and `receive` between two namespaces joined only through a userspace relay
/// (Interop/impairer) that delays, jitters, reorders, duplicates and drops frames, mDNS included:
/// discovery, the invitation, TLS and the file all cross it, and the file arrives byte-identical.
/// The relay's counts prove the impairment happened.
@Suite("Impaired links through a relay", .serialized, .enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
struct ImpairedLinkRelayProcessTests {
    typealias Apps = TerminalAppScriptProcessTests

    static let impairments: [(RelayedLink.Impairment, size: Int)] = [
        (.init(delayMs: 50, jitterMs: 20, reorder: 5, duplicate: 5), 8 << 20),
        (.init(delayMs: 10, jitterMs: 5, reorder: 20, duplicate: 10, loss: 2), 2 << 20),
    ]

    @Test(arguments: 0..<impairments.count)
    func aFileCrossesADelayedReorderedDuplicatingLink(case index: Int) async throws {
        let (impairment, size) = Self.impairments[index]
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let relay = try RelayedLink(namespaces, impairment)
        let directory = try ImpairedLinkProcessTests.scratch("relay\(index)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let inbox = directory.appendingPathComponent("inbox")
        let (file, content) = try Apps.file(directory, "relayed.bin", size: size, seed: UInt64(40 + index))
        let service = "mp-relay\(index)"
        let receiver = try Apps.start(namespaces, 1, ["receive", "--dir", inbox.path, "--timeout", "150"] + Apps.peer("bob", service) + Apps.trustCA)
        _ = await Apps.read(receiver, until: "waiting for files")
        let started = ContinuousClock.now
        let sent = try await Apps.run(namespaces, 0, ["send", file.path, "--to", "bob", "--timeout", "90"] + Apps.peer("alice", service) + Apps.trustCA, seconds: 150)
        let elapsed = ContinuousClock.now - started
        #expect(sent.status == 0, "\(impairment): \(sent.output)")
        #expect(await Apps.exitStatus(receiver, within: 30) == 0)
        #expect(try Data(contentsOf: inbox.appendingPathComponent("relayed.bin")) == content)
        let counts = try await relay.stop()
        print("relayed link \(impairment): \(size >> 20) MiB found, invited and sent in \(elapsed); relay counts \(counts.mapValues { "\($0.forwarded) forwarded, \($0.reordered) reordered, \($0.duplicated) duplicated, \($0.dropped) dropped" })")
        for direction in ["a->b", "b->a"] {
            let count = try #require(counts[direction])
            #expect(count.forwarded > 100 && count.reordered > 0 && count.duplicated > 0, "\(direction): \(count)")
            #expect(count.delayed == count.received - count.dropped)
            if impairment.loss > 0 { #expect(count.dropped > 0, "\(direction): \(count)") }
        }
    }

    /// Unreliable messages between two interop harnesses across the relay: some are lost (the
    /// loss is reported), reordered ones are accepted, and none is delivered twice although the
    /// relay duplicates a tenth of all frames.
    @Test func datagramsDegradeWithoutDuplicates() async throws {
        let namespaces = try NetworkNamespaces(count: 2)
        defer { namespaces.remove() }
        let impairment = RelayedLink.Impairment(delayMs: 5, jitterMs: 3, reorder: 20, duplicate: 10, loss: 5)
        let relay = try RelayedLink(namespaces, impairment)
        let a = try HarnessPeer(["--name", "a", "--listen", namespaces.address(of: 0)], namespace: namespaces.names[0])
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "b", "--listen", namespaces.address(of: 1)], namespace: namespaces.names[1])
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "connected")
        let count = 1_000
        for index in 0..<count {
            try a.send("SEND unreliable \(b.peer) " + String(format: "%08x", index))
            try await a.expect("OK SEND")
        }
        // A reliable message after them all; once it is in, stop the relay, so nothing more
        // arrives, and let b finish: what it printed by BYE is everything it delivered.
        try a.send("SEND reliable \(b.peer) 656e64")
        try await b.expect("RECEIVED \(a.peer) 3 ", seconds: 30)
        let counts = try await relay.stop()
        try await b.quit()
        let payloads = b.allPrinted("RECEIVED \(a.peer) 4 ").compactMap { $0.count == 5 ? $0[4] : nil }
        let distinct = Set(payloads)
        print("relayed datagrams (\(impairment)): \(distinct.count) of \(count) delivered (\(String(format: "%.1f", Double(count - distinct.count) / Double(count) * 100)) % lost), \(payloads.count - distinct.count) duplicates; relay duplicated \(counts["a->b"]?.duplicated ?? 0) frames a->b")
        #expect(payloads.count == distinct.count, "duplicates delivered")
        #expect(distinct.isSubset(of: Set((0..<count).map { String(format: "%08x", $0) })))
        #expect(distinct.count >= count / 2, "only \(distinct.count) of \(count) arrived")
        #expect((counts["a->b"]?.duplicated ?? 0) > 0)
    }
}
