import Foundation
#if canImport(Glibc)
import Glibc
#endif
import MultipeerCrypto
import MultipeerTestSupport
import Synchronization
import Testing

/// `interop-peer` (Interop/HARNESS.md) in child processes, driven line by line as a peer written
/// in another language would drive it: two harnesses connect and exchange every kind of traffic.
@Suite("Processes: the interop harness, two of them talking", .serialized)
struct InteropHarnessProcessTests {
    @Test func twoHarnessesConnectAndExchangeMessagesStreamsAndResources() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let a = try HarnessPeer(["--name", "a"])
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "b", "--resource-dir", scratch.path("received")])
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "connected")

        // A small reliable message: its bytes come back in the line.
        try a.send("SEND reliable \(b.peer) 68656c6c6f")
        try await a.expect("OK SEND")
        let hello = try await b.expect("RECEIVED \(a.peer)")
        #expect(hello == ["RECEIVED", a.peer, "5", sha256Hex(Array("hello".utf8)), "68656c6c6f"])

        // A multi-MiB message from a file: only its length and digest come back.
        let big = seededContent(3 << 20 | 12_345, seed: 1)
        let bigPath = try scratch.file("big.bin", big)
        try a.send("SEND reliable \(b.peer) @\(bigPath)")
        try await a.expect("OK SEND", seconds: 60)
        let received = try await b.expect("RECEIVED \(a.peer)", seconds: 60)
        #expect(received == ["RECEIVED", a.peer, "\(big.count)", sha256Hex(big), "-"])

        // Unreliable: datagrams may be lost, so several go out and one arriving is the evidence.
        let datagrams = ["01", "0202", "030303"]
        for payload in datagrams {
            try a.send("SEND unreliable \(b.peer) \(payload)")
            try await a.expect("OK SEND")
        }
        let datagram = try await b.expect("RECEIVED \(a.peer)")
        #expect(datagram.count == 5 && datagrams.contains(datagram[4]), "\(datagram)")
        if datagram.count == 5, let bytes = hexBytes(datagram[4]) {
            #expect(datagram[2] == "\(bytes.count)" && datagram[3] == sha256Hex(bytes))
        }

        // A stream, its name percent-encoded both ways.
        let streamed = seededContent(2 << 20 | 777, seed: 2)
        let streamPath = try scratch.file("stream.bin", streamed)
        try a.send("STREAM \(b.peer) a%20stream \(streamPath)")
        #expect(try await a.expect("STREAM-SENT a%20stream", seconds: 60) == ["STREAM-SENT", "a%20stream", "ok"])
        let stream = try await b.expect("STREAM \(a.peer)", seconds: 60)
        #expect(stream == ["STREAM", a.peer, "a%20stream", "\(streamed.count)", sha256Hex(streamed)])

        // A resource: offered, then verified and reported on arrival, and acknowledged to the sender.
        let resource = seededContent(3 << 20 | 4_321, seed: 3)
        let resourcePath = try scratch.file("resource.bin", resource)
        try a.send("RESOURCE \(b.peer) r%C3%A9sum%C3%A9 \(resourcePath)")
        #expect(try await b.expect("RESOURCE-STARTED \(a.peer)", seconds: 60) == ["RESOURCE-STARTED", a.peer, "r%C3%A9sum%C3%A9"])
        let arrived = try await b.expect("RESOURCE \(a.peer)", seconds: 60)
        #expect(arrived == ["RESOURCE", a.peer, "r%C3%A9sum%C3%A9", "\(resource.count)", sha256Hex(resource)])
        #expect(try await a.expect("RESOURCE-SENT r%C3%A9sum%C3%A9", seconds: 60) == ["RESOURCE-SENT", "r%C3%A9sum%C3%A9", "ok"])

        try a.send("PEERS")
        #expect(try await a.expect("PEERS") == ["PEERS", b.peer])

        // QUIT says goodbye: the other side sees the peer leave.
        try await a.quit()
        try await b.expect("STATE \(a.peer) notConnected")
        try await b.quit()
    }

    @Test func aHarnessThatRejectsTheCertificateLeavesBothSidesNotConnected() async throws {
        let a = try HarnessPeer(["--name", "a", "--trust", "reject"])
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "b"])
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "notConnected")
        let trust = try await a.line("TRUST \(b.peer)")
        #expect(trust.count == 5 && trust[3] == "rejected", "\(trust)")
        try a.send("PEERS")
        #expect(try await a.expect("PEERS") == ["PEERS"])
        try await a.quit()
        try await b.quit()
    }

    @Test func identitiesIssuedUnderTheTrustedCAConnect() async throws {
        let authority = "ca:" + certificates("ca/ca.pem")
        let a = try HarnessPeer(["--name", "alice", "--trust", authority] + identity("alice"))
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "bob", "--trust", authority] + identity("bob"))
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "connected")
        // Each side saw the other's leaf, by its fingerprint, and accepted it; both were shown
        // the same 6-digit pairing code.
        let seenByA = try await a.line("TRUST \(b.peer)")
        let seenByB = try await b.line("TRUST \(a.peer)")
        #expect(Array(seenByA.prefix(4)) == ["TRUST", b.peer, try fingerprint("bob"), "accepted"])
        #expect(Array(seenByB.prefix(4)) == ["TRUST", a.peer, try fingerprint("alice"), "accepted"])
        #expect(seenByA.count == 5 && seenByA[4].count == 6 && seenByA[4].allSatisfy(\.isNumber), "\(seenByA)")
        #expect(seenByA.last == seenByB.last)
        try await a.quit()
        try await b.quit()
    }

    @Test func identitiesFromAnotherCAAreRejected() async throws {
        // Alice trusts only the unrelated CA, so bob's chain (issued under the test root) fails.
        let a = try HarnessPeer(["--name", "alice", "--trust", "ca:" + certificates("other-ca/ca.pem")] + identity("alice"))
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "bob", "--trust", "ca:" + certificates("ca/ca.pem")] + identity("bob"))
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "notConnected")
        #expect(Array(try await a.line("TRUST \(b.peer)").prefix(4)) == ["TRUST", b.peer, try fingerprint("bob"), "rejected"])
        try await a.quit()
        try await b.quit()
    }

    @Test func malformedCommandsAreAnsweredAndTheHarnessCarriesOn() async throws {
        let a = try HarnessPeer(["--name", "a"])
        defer { a.kill() }
        let stranger = "01" + String(repeating: "ab", count: 16) + "0161"  // a well-formed peer ID
        let malformed: [(line: String, word: String)] = [
            ("FROB", "FROB"),
            ("make-data \(stranger)", "make-data"),
            ("MAKE-DATA", "MAKE-DATA"),
            ("MAKE-DATA zz", "MAKE-DATA"),
            ("MAKE-DATA 0102", "MAKE-DATA"),
            ("CONNECT \(stranger) 0", "CONNECT"),
            ("SEND reliable \(stranger)", "SEND"),
            ("SEND sometimes \(stranger) 00", "SEND"),
            ("SEND reliable \(stranger) xyz", "SEND"),
            ("SEND reliable \(stranger) @", "SEND"),
            ("STREAM \(stranger) bad%zzname /dev/null", "STREAM"),
            ("RESOURCE \(stranger) name", "RESOURCE"),
            ("CANCEL", "CANCEL"),
            ("PEERS now", "PEERS"),
            ("QUIT please", "QUIT"),
            ("\u{7F}\u{1}%", "%7F%01%25"),
        ]
        for (line, word) in malformed {
            try a.send(line)
            #expect(try await a.expect("ERROR ") == ["ERROR", word, "usage"], "\(line)")
        }
        // Well-formed but refused by the library: the MCError code is the reason.
        try a.send("SEND reliable \(stranger) 00")
        #expect(try await a.expect("ERROR ") == ["ERROR", "SEND", "notConnected"])
        try a.send("CONNECT \(stranger) 00")
        #expect(try await a.expect("ERROR ") == ["ERROR", "CONNECT", "invalidParameter"])
        // Still working.
        try a.send("MAKE-DATA \(stranger)")
        #expect(try await a.expect("DATA ").count == 3)
        try a.send("CANCEL \(stranger)")
        try await a.expect("OK CANCEL")
        try await a.quit()

        // A bad command line is no session at all: the reason on standard error, status 2.
        let (status, text) = try await BuiltProducts.run(BuiltProducts.executable("interop-peer"), ["--trust", "sometimes"], seconds: 20)
        #expect(status == 2 && text.contains("--trust sometimes"), "\(text)")
        let named = try await BuiltProducts.run(BuiltProducts.executable("interop-peer"), ["--listen", "localhost"], seconds: 20)
        #expect(named.status == 2 && named.output.contains("--listen localhost"), "\(named.output)")
    }

    @Test func theEndOfInputEndsTheHarnessAsQuitDoes() async throws {
        let a = try HarnessPeer(["--name", "a"])
        defer { a.kill() }
        try a.closeInput()
        try await a.expect("BYE")
        #expect(try await a.exitStatus() == 0)
    }

    // MARK: Helpers

    /// A firewall drop makes `sendmsg` fail (EPERM), and SwiftNIO closes a UDP socket on that
    /// error: the session binds its datagram socket again on the same port, so unreliable
    /// messages flow once datagrams pass again. In a namespace of the test's own (nftables).
    @Test(.enabled(if: NetworkNamespaces.available && FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft")))
    func unreliableMessagesFlowAgainAfterTheirSocketFailed() async throws {
        let namespaces = try NetworkNamespaces(count: 1)
        defer { namespaces.remove() }
        let namespace = namespaces.names[0]
        let a = try HarnessPeer(["--name", "a"], namespace: namespace)
        defer { a.kill() }
        let b = try HarnessPeer(["--name", "b"], namespace: namespace)
        defer { b.kill() }
        try await HarnessPeer.connect(a, b, expecting: "connected")
        let nft = { (arguments: [String]) throws in _ = try NetworkNamespaces.ip(["netns", "exec", namespace, "nft"] + arguments) }
        try nft(["add", "table", "inet", "blackout"])
        try nft(["add", "chain", "inet", "blackout", "out", "{ type filter hook output priority 0; }"])
        try nft(["add", "rule", "inet", "blackout", "out", "meta", "l4proto", "udp", "drop"])
        // Into the blackout: the send fails in the kernel and a's datagram socket is closed.
        for _ in 0..<3 {
            try a.send("SEND unreliable \(b.peer) 0d")
            try await a.expect("OK SEND")
        }
        try nft(["delete", "table", "inet", "blackout"])
        // Datagrams pass again: one of several arriving is the evidence (they may be lost).
        let expected = "RECEIVED \(a.peer) 1 \(sha256Hex([0x0E])) 0e"
        let arrived = try await withDeadline(seconds: 15) { () -> [String] in
            while true {
                try a.send("SEND unreliable \(b.peer) 0e")
                try await a.expect("OK SEND")
                try await Task.sleep(for: .milliseconds(200))
                if let line = b.printed(expected) { return line }
            }
        }
        #expect(arrived.joined(separator: " ") == expected)
        // The blackout's datagrams never arrived: nothing was queued and replayed.
        #expect(b.printed("RECEIVED \(a.peer) 1 \(sha256Hex([0x0D]))") == nil)
    }

    private func certificates(_ path: String) -> String {
        repositoryRootURL.appendingPathComponent("Certificates/" + path).path
    }

    private func identity(_ name: String) -> [String] {
        ["--identity", certificates("peers/\(name).p12"), "--password-file", certificates("password.txt")]
    }

    /// The leaf's SHA-256 fingerprint in the harness's form (lowercase hex).
    private func fingerprint(_ name: String) throws -> String {
        let pem = try String(contentsOfFile: certificates("peers/\(name).pem"), encoding: .utf8)
        return hexString(try Certificate.chain(pemEncoded: pem)[0].sha256Fingerprint)
    }
}

/// A scratch directory of the test's own; `remove()` it when the test ends (a deferred call, not
/// a deinit, which could run after the last use while a child still reads the files).
private struct Scratch {
    let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("interop-harness-\(UUID().uuidString)")

    init() throws { try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true) }

    func remove() { try? FileManager.default.removeItem(at: root) }

    func path(_ name: String) -> String { root.appendingPathComponent(name).path }

    func file(_ name: String, _ bytes: [UInt8]) throws -> String {
        let url = root.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return url.path
    }
}

private func sha256Hex(_ bytes: [UInt8]) -> String { hexString(SHA256Hasher.digest(bytes)) }

private func hexString(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

private func hexBytes(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    let bytes = stride(from: 0, to: digits.count, by: 2).compactMap { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16) }
    return bytes.count == digits.count / 2 ? bytes : nil
}
