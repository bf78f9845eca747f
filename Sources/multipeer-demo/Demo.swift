// The project's main job: two peers on this machine find each other over mDNS (when
// MULTIPEER_DEMO_INTERFACE names an interface to pin discovery to; scripts/demo runs the demo in
// a network namespace of its own for that), connect over real sockets with freshly made
// identities and required encryption, check each other's certificates, and exchange a message,
// datagrams, a stream and a file through Apple's API.
//   multipeer-demo                 run the demo
//   multipeer-demo peer PEERID [MAX-OPEN-FILES]
//                                  (for tests) serve one session whose connection data is made
//                                  for PEERID (hex wire representation), print it, wait 60 s;
//                                  optionally with the open-file limit lowered first
//   multipeer-demo advertise NAME SERVICE INTERFACE [KEY=VALUE ...] | browse SERVICE INTERFACE
//                                  (for tests, inside network namespaces) discovery on one
//                                  interface, printing ADVERTISING / INSTANCE / RENAMED / FOUND /
//                                  LOST lines; MULTIPEER_PEER_IDENTIFIER (32 hex digits) fixes the
//                                  advertiser's peer identifier, MULTIPEER_DISCOVERY_ENGINE its engine
//   multipeer-demo invitations INTERFACE [ROUNDS]
//                                  (for tests, inside a network namespace) the invitation scenarios,
//                                  one OK/FAIL line each
//   multipeer-demo assistant INTERFACE
//                                  (for tests, inside a network namespace) the advertiser assistant
//                                  and the browser model, one OK/FAIL line each
//   multipeer-demo chatter first|second COUNT INTERVAL-MS
//                                  (for tests, inside network namespaces) one side of a chat whose
//                                  link the test breaks: see RecoveryModes.swift
//   multipeer-demo soaker NAME
//                                  (for scripts/soak, inside a network namespace) one peer of the
//                                  soak: see SoakModes.swift
//   multipeer-demo sink PEERID COUNT
//                                  (for tests) the same, with an application that takes no
//                                  message until a line arrives on standard input, then checks
//                                  COUNT messages of StallPattern and prints RECEIVED
import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerDiscovery
import Synchronization
import MultipeerProtocol

@main
struct Demo {
    static func main() async {
        do {
            let arguments = Array(CommandLine.arguments.dropFirst())
            if arguments.first == "peer", arguments.count == 2 || arguments.count == 3 {
                if arguments.count == 3 {
                    guard let limit = rlim_t(arguments[2]) else { fail("MAX-OPEN-FILES must be a number") }
                    var files = rlimit(rlim_cur: limit, rlim_max: limit)
                    guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0 else { fail("setrlimit failed") }
                }
                try await servePeer(forHex: arguments[1])
            } else if arguments.first == "chatter", arguments.count == 4, ["first", "second"].contains(arguments[1]),
                let count = Int(arguments[2]), let interval = Int(arguments[3])
            {
                try await chatter(first: arguments[1] == "first", count: count, interval: interval)
            } else if arguments.first == "soaker", arguments.count == 2 {
                try await soaker(name: arguments[1])
            } else if arguments.first == "sink", arguments.count == 3, let count = Int(arguments[2]) {
                try await serveSink(forHex: arguments[1], expecting: count)
            } else if arguments.first == "advertise", arguments.count >= 4 {
                let info = Dictionary(arguments.dropFirst(4).compactMap { pair -> (String, String)? in
                    guard let equals = pair.firstIndex(of: "=") else { return nil }
                    return (String(pair[..<equals]), String(pair[pair.index(after: equals)...]))
                }, uniquingKeysWith: { first, _ in first })
                try await advertise(name: arguments[1], service: arguments[2], interface: arguments[3], info: info)
            } else if arguments.first == "browse", arguments.count == 3 {
                try await browse(service: arguments[1], interface: arguments[2])
            } else if arguments.first == "invitations", arguments.count >= 2 {
                try await invitationScenarios(interface: arguments[1], rounds: arguments.count > 2 ? Int(arguments[2]) ?? 50 : 50)
            } else if arguments.first == "assistant", arguments.count == 2 {
                try await assistantScenarios(interface: arguments[1])
            } else if arguments.isEmpty {
                try await runDemo()
            } else {
                fail("usage: multipeer-demo [peer PEERID-HEX [MAX-OPEN-FILES] | sink PEERID-HEX COUNT | advertise NAME SERVICE INTERFACE [KEY=VALUE ...] | browse SERVICE INTERFACE]")
            }
        } catch {
            fail("\(error)")
        }
    }

    static func runDemo() async throws {
        print("crypto: \(CryptoRuntime.openSSLVersion), libsodium \(CryptoRuntime.sodiumVersion)")
        let authority = try DemoAuthority()
        let aliceIdentity = try authority.issue("alice")
        let bobIdentity = try authority.issue("bob")
        print("identities: alice and bob, Ed25519, issued by \(authority.root.subject)")

        let alice = try MCSession(peer: MCPeerID(displayName: "alice"), identity: aliceIdentity, encryptionPreference: .required, configuration: .loopbackOnly)
        let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: bobIdentity, encryptionPreference: .required, configuration: .loopbackOnly)
        for session in [alice, bob] {
            let name = session.myPeerID.displayName
            session.setCertificateEvaluator { peer, certificates in
                guard let leaf = certificates?.first?.certificate else {
                    print("\(name): \(peer.displayName) has no certificate: rejected")
                    return false
                }
                let outcome = TrustEvaluation(anchors: [authority.root]).evaluate(certificates!.map(\.certificate))
                print("\(name) checks \(peer.displayName): CN=\(leaf.subjectCommonName ?? "?"), SHA-256 \(leaf.sha256FingerprintText.prefix(23))..., "
                    + "\(outcome.isTrusted ? "trusted" : "REJECTED: \(outcome)"), pairing code \(session.pairingCode(with: peer) ?? "?")")
                return outcome.isTrusted && leaf.subjectCommonName == peer.displayName
            }
        }
        let aliceEvents = alice.events()
        let bobEvents = bob.events()

        if let interface = ProcessInfo.processInfo.environment["MULTIPEER_DEMO_INTERFACE"] {
            // Apple's flow: Bob advertises, Alice finds him and invites him into her session.
            try await discoverAndInvite(bob: bob, from: alice, on: interface)
        } else {
            print("discovery: skipped (scripts/demo runs it in a network namespace of its own when it can)")
            // Alice makes connection data for Bob; Bob dials her with it (out of band in a real app).
            let data = try await alice.nearbyConnectionData(forPeer: bob.myPeerID)
            print("connection data: \(data.count) bytes from alice for bob")
            bob.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
        }
        try await within(seconds: 15) {
            try await waitConnected(aliceEvents, to: bob.myPeerID, as: "alice")
            try await waitConnected(bobEvents, to: alice.myPeerID, as: "bob")
        }

        try bob.send(Data("Hello Alice, this is Bob.".utf8), toPeers: [alice.myPeerID], with: .reliable)
        let greeting = try await within(seconds: 10) { try await nextData(aliceEvents) }
        print("alice received: \"\(String(decoding: greeting, as: UTF8.self))\"")

        var blob = Data(count: 1_048_576)
        for index in blob.indices { blob[index] = UInt8(truncatingIfNeeded: index &* 7 &+ 3) }
        try alice.send(blob, toPeers: [bob.myPeerID], with: .reliable)
        let received = try await within(seconds: 10) { try await nextData(bobEvents) }
        guard received == blob else { fail("the 1 MiB message arrived changed") }
        print("bob received: 1 MiB reliable message, byte-identical")

        // Unreliable: sealed UDP datagrams, each delivered at most once.
        for tick in 0..<20 {
            try alice.send(Data("tick \(tick)".utf8), toPeers: [bob.myPeerID], with: .unreliable)
            try await Task.sleep(for: .milliseconds(5))
        }
        let ticks = try await within(seconds: 5) { () -> Int in
            var seen = Set<Data>()
            let deadline = ContinuousClock.now + .seconds(2)
            for await event in bobEvents {
                if case .dataReceived(let data, _) = event { seen.insert(data) }
                if seen.count == 20 || ContinuousClock.now > deadline { break }
            }
            return seen.count
        }
        guard ticks > 0 else { fail("no unreliable datagram arrived") }
        print("bob received \(ticks) of 20 unreliable datagrams (sealed with XChaCha20-Poly1305)")

        try await exchangeStream(from: alice, to: bob, bobEvents: bobEvents)
        try await exchangeFile(from: bob, to: alice, aliceEvents: aliceEvents)

        await bob.disconnectAndWait()
        try await within(seconds: 10) {
            for await event in aliceEvents {
                if case .peerStateChanged(let peer, .notConnected) = event, peer == bob.myPeerID { break }
            }
        }
        print("bob disconnected; alice saw it. Demo passed.")
        await alice.disconnectAndWait()
    }

    /// Bob advertises on `interface` only; Alice browses there, finds him with his discovery
    /// info and invites him; he accepts into his session (docs/PROTOCOL.md §7.2).
    static func discoverAndInvite(bob: MCSession, from alice: MCSession, on interface: String) async throws {
        let configuration = DiscoveryConfiguration(interfaceNames: [interface])
        let advertiser = try MCNearbyServiceAdvertiser(
            peer: bob.myPeerID, discoveryInfo: ["app": "multipeer-demo"], serviceType: "mpc-demo", configuration: configuration,
            listenHost: "127.0.0.1")
        let browser = try MCNearbyServiceBrowser(peer: alice.myPeerID, serviceType: "mpc-demo", configuration: configuration)
        let found = browser.events()
        let invitations = advertiser.invitations()
        try await advertiser.start()
        try await browser.start()
        let bobID = bob.myPeerID
        try await within(seconds: 10) {
            for await event in found {
                if case .found(let peer, let info, let endpoints) = event, peer == bobID {
                    print("alice found \(peer.displayName) over mDNS on \(interface): discoveryInfo \(info), at \(endpoints.map { "\($0.host):\($0.port)" }.joined(separator: ", "))")
                    return
                }
            }
        }
        let answering = Task {
            for await invitation in invitations {
                print("bob is invited by \(invitation.peer.displayName) (\"\(String(decoding: invitation.context, as: UTF8.self))\"): accepts")
                invitation.accept(into: bob)
                return
            }
        }
        try await browser.invite(bobID, to: alice, context: Data("demo".utf8), timeout: 10)
        print("alice's invitation accepted: connected to bob")
        answering.cancel()
        await browser.stop()
        await advertiser.stop()
    }

    /// Alice streams 4 MiB to Bob in pieces; Bob reads it as it comes.
    static func exchangeStream(from alice: MCSession, to bob: MCSession, bobEvents: MCSession.Events) async throws {
        var content = Data(count: 4 << 20)
        for index in content.indices { content[index] = UInt8(truncatingIfNeeded: index &* 13 &+ 1) }
        let writer = try alice.openStream(named: "telemetry", to: bob.myPeerID)
        let payload = content
        let writing = Task {
            for start in stride(from: 0, to: payload.count, by: 100_000) {
                try await writer.write(payload[start..<min(start + 100_000, payload.count)])
            }
            writer.close()
        }
        let received = try await within(seconds: 30) { () -> Data in
            for await event in bobEvents {
                guard case .streamReceived(let reader, _) = event else { continue }
                var bytes = Data()
                for try await chunk in reader { bytes += chunk }
                print("bob read stream \"\(reader.name)\": \(bytes.count) bytes")
                return bytes
            }
            throw MCError(.cancelled)
        }
        try await writing.value
        guard received == content else { fail("the stream arrived changed") }
        print("stream: 4 MiB, byte-identical, flow-controlled")
    }

    /// Bob sends Alice an 8 MiB file as a resource, with progress; she gets it verified (SHA-256).
    static func exchangeFile(from bob: MCSession, to alice: MCSession, aliceEvents: MCSession.Events) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("multipeer-demo-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var content = Data(count: 8 << 20)
        for index in content.indices { content[index] = UInt8(truncatingIfNeeded: index &* 31 &+ 5) }
        let source = directory.appendingPathComponent("holiday.jpg")
        try content.write(to: source)
        let quarters = Mutex(0)
        try await within(seconds: 30) {
            try await bob.sendResource(at: source, named: "holiday.jpg", to: alice.myPeerID) { sent, total in
                let quarter = total > 0 ? Int(sent * 4 / total) : 4
                let report = quarters.withLock { reported -> Bool in
                    guard quarter > reported else { return false }
                    reported = quarter
                    return true
                }
                if report { print("file: \(quarter * 25)% sent (\(sent) of \(total) bytes)") }
            }
        }
        let url = try await within(seconds: 10) { () -> URL in
            for await event in aliceEvents {
                guard case .resourceReceived(let name, _, let result) = event, name == "holiday.jpg" else { continue }
                return try result.get()
            }
            throw MCError(.cancelled)
        }
        defer { try? FileManager.default.removeItem(at: url) }
        guard try Data(contentsOf: url) == content else { fail("the file arrived changed") }
        print("alice received file \"holiday.jpg\": 8 MiB, SHA-256 verified by the session, byte-identical")
    }

    static func waitConnected(_ events: MCSession.Events, to peer: MCPeerID, as name: String) async throws {
        for await event in events {
            guard case .peerStateChanged(let changed, let state) = event, changed == peer else { continue }
            print("\(name): \(peer.displayName) is \(state)")
            if state == .connected { return }
            if state == .notConnected { fail("\(name) could not connect to \(peer.displayName)") }
        }
    }

    static func nextData(_ events: MCSession.Events) async throws -> Data {
        for await event in events {
            if case .dataReceived(let data, _) = event { return data }
        }
        throw MCError(.cancelled)
    }

    static func within<T: Sendable>(seconds: Int, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw MCError(.timedOut, reason: "the demo took longer than \(seconds) s")
            }
            let result = try await group.next()!
            group.cancelAll()
            return result
        }
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        return stride(from: 0, to: digits.count, by: 2).compactMap { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16) }
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("multipeer-demo: \(message)\n".utf8))
        exit(1)
    }
}

/// A throwaway certificate authority for the demo.
struct DemoAuthority: Sendable {
    let key: PrivateKey
    let root: Certificate

    init() throws {
        key = try PrivateKey.generate(.ed25519)
        root = try CertificateBuilder(commonName: "multipeer-demo CA", role: .certificateAuthority(pathLength: 0)).issue(for: key)
    }

    func issue(_ name: String) throws -> SecurityIdentity {
        let peerKey = try PrivateKey.generate(.ed25519)
        let certificate = try CertificateBuilder(commonName: name).issue(for: peerKey, issuer: (root, key))
        return try SecurityIdentity(privateKey: peerKey, certificateChain: [certificate])
    }
}
