import Foundation
import MultipeerConnectivity
import MultipeerDiscovery
import MultipeerProtocol

/// `multipeer-demo invitations INTERFACE [ROUNDS]`: the invitation scenarios of docs/PROTOCOL.md
/// §7.2 between sessions in this process, found over mDNS on INTERFACE (run it inside a network
/// namespace), one line per scenario: `OK <scenario> <detail>` or `FAIL <scenario> <detail>`.
extension Demo {
    static func invitationScenarios(interface: String, rounds: Int) async throws {
        let configuration = DiscoveryConfiguration(interfaceNames: [interface])
        var failed: [String] = []
        func report(_ ok: Bool, _ scenario: String, _ detail: String) {
            print("\(ok ? "OK" : "FAIL") \(scenario) \(detail)")
            if !ok { failed.append(scenario) }
        }

        /// A peer that advertises and browses, with its own session.
        final class Node: NSObject, MCNearbyServiceAdvertiserDelegate, @unchecked Sendable {
            let session: MCSession
            let advertiser: MCNearbyServiceAdvertiser
            let browser: MCNearbyServiceBrowser
            let found: AsyncStream<MCNearbyServiceBrowser.Event>
            /// What the advertiser answers: the session to join, or nil to decline; never answers when `silent`.
            var answer: (MCPeerID) -> MCSession?
            var silent = false
            var asked: [Data] = []

            init(_ name: String, preference: MCEncryptionPreference = .optional, configuration: DiscoveryConfiguration) throws {
                session = MCSession(peer: MCPeerID(displayName: name), securityIdentity: nil, encryptionPreference: preference, configuration: .loopbackOnly)
                advertiser = try MCNearbyServiceAdvertiser(peer: session.myPeerID, discoveryInfo: nil, serviceType: "mpc-invite", configuration: configuration, listenHost: "127.0.0.1")
                browser = try MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: "mpc-invite", configuration: configuration)
                found = browser.events()
                answer = { _ in nil }
                super.init()
                answer = { [unowned self] _ in self.session }
                advertiser.delegate = self
            }

            func start() async throws {
                try await advertiser.start()
                try await browser.start()
            }

            func stop() async {
                await advertiser.stop()
                await browser.stop()
                await session.disconnectAndWait()
            }

            func waitFound(_ peer: MCPeerID) async throws {
                try await Demo.within(seconds: 10) {
                    for await event in self.found { if case .found(let seen, _, _) = event, seen == peer { return } }
                }
            }

            func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void) {
                asked.append(context ?? Data())
                guard !silent else { return }
                let session = answer(peerID)
                invitationHandler(session != nil, session)
            }
        }

        func outcome(_ body: () async throws -> Void) async -> String {
            do {
                try await body()
                return "connected"
            } catch let error as MCInvitationError {
                return "\(error.reason)"
            } catch let error as MCError {
                return "MCError.\(error.code)"
            } catch {
                return "\(error)"
            }
        }

        let alice = try Node("alice", configuration: configuration)
        let bob = try Node("bob", configuration: configuration)
        try await alice.start()
        try await bob.start()
        try await alice.waitFound(bob.session.myPeerID)

        // Accepted: connected on both sides, the context seen by the advertiser.
        var result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: Data("hello".utf8), timeout: 10) }
        // The inviter returns once it is connected; the invitee's session may take a moment more.
        let bothConnected: Void? = try? await within(seconds: 5) {
            while alice.session.connectedPeers != [bob.session.myPeerID] || bob.session.connectedPeers != [alice.session.myPeerID] {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        report(result == "connected" && bothConnected != nil && bob.asked.last == Data("hello".utf8), "accept", "\(result)")
        await alice.session.disconnectAndWait()
        try await within(seconds: 10) { while !bob.session.connectedPeers.isEmpty { try await Task.sleep(for: .milliseconds(10)) } }

        bob.answer = { _ in nil }
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 10) }
        report(result == "declined" && alice.session.connectedPeers.isEmpty, "decline", result)

        bob.silent = true
        let started = ContinuousClock.now
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 1) }
        let waited = ContinuousClock.now - started
        report(result == "timedOut" && waited < .seconds(5), "timeout", "\(result) after \(waited)")
        bob.silent = false

        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: Data(count: 4_097), timeout: 10) }
        report(result == "MCError.invalidParameter", "context-too-large", result)

        // A session whose encryption cannot meet the inviter's.
        let strict = MCSession(peer: MCPeerID(displayName: "bob-strict"), securityIdentity: nil, encryptionPreference: .required, configuration: .loopbackOnly)
        let plain = MCSession(peer: MCPeerID(displayName: "alice-plain"), securityIdentity: nil, encryptionPreference: .none, configuration: .loopbackOnly)
        bob.answer = { _ in strict }
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: plain, context: nil, timeout: 10) }
        report(result == "encryptionIncompatible", "incompatible", result)

        // A full session: bob's has 7 members already.
        var members: [MCSession] = []
        for index in 0..<7 {
            let member = MCSession(peer: MCPeerID(displayName: "member\(index)"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
            member.connectPeer(bob.session.myPeerID, withNearbyConnectionData: try await bob.session.nearbyConnectionData(forPeer: member.myPeerID))
            members.append(member)
        }
        try await within(seconds: 20) { while bob.session.connectedPeers.count < 7 { try await Task.sleep(for: .milliseconds(10)) } }
        bob.answer = { _ in bob.session }
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 10) }
        report(result == "sessionFull", "session-full", result)
        for member in members { await member.disconnectAndWait() }
        try await within(seconds: 20) { while !bob.session.connectedPeers.isEmpty { try await Task.sleep(for: .milliseconds(10)) } }

        // Joining a session of three: bob is introduced to alice's other members.
        let carol = MCSession(peer: MCPeerID(displayName: "carol"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        let dave = MCSession(peer: MCPeerID(displayName: "dave"), securityIdentity: nil, encryptionPreference: .optional, configuration: .loopbackOnly)
        for other in [carol, dave] {
            other.connectPeer(alice.session.myPeerID, withNearbyConnectionData: try await alice.session.nearbyConnectionData(forPeer: other.myPeerID))
        }
        try await within(seconds: 20) { while alice.session.connectedPeers.count < 2 || carol.connectedPeers.count < 2 { try await Task.sleep(for: .milliseconds(10)) } }
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 10) }
        let meshed: Void? = try? await within(seconds: 20) { while bob.session.connectedPeers.count < 3 || carol.connectedPeers.count < 3 || dave.connectedPeers.count < 3 { try await Task.sleep(for: .milliseconds(10)) } }
        report(result == "connected" && meshed != nil, "join-three", "\(result), bob sees \(bob.session.connectedPeers.count) members")
        for session in [carol, dave, alice.session, bob.session] { await session.disconnectAndWait() }
        try await within(seconds: 20) { while !bob.session.connectedPeers.isEmpty || !alice.session.connectedPeers.isEmpty { try await Task.sleep(for: .milliseconds(10)) } }

        // Both invite each other at the same moment, both accept: one connection each, every round.
        try await bob.waitFound(alice.session.myPeerID)
        var clean = 0
        for round in 0..<rounds {
            async let fromAlice = outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 10) }
            async let fromBob = outcome { try await bob.browser.invite(alice.session.myPeerID, to: bob.session, context: nil, timeout: 10) }
            let (a, b) = await (fromAlice, fromBob)
            let settled: Void? = try? await within(seconds: 10) {
                while alice.session.connectedPeers != [bob.session.myPeerID] || bob.session.connectedPeers != [alice.session.myPeerID] {
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
            if settled != nil && (a == "connected" || b == "connected") { clean += 1 } else { print("round \(round): alice \(a), bob \(b)") }
            await alice.session.disconnectAndWait()
            await bob.session.disconnectAndWait()
            try await within(seconds: 10) { while !bob.session.connectedPeers.isEmpty || !alice.session.connectedPeers.isEmpty { try await Task.sleep(for: .milliseconds(5)) } }
        }
        report(clean == rounds, "mutual", "\(clean) of \(rounds) rounds ended with one connection each")

        // A peer that vanished: its advertiser stopped (goodbye), so the browser no longer has it.
        await bob.advertiser.stop()
        try await within(seconds: 5) { for await event in alice.found { if case .lost(let peer) = event, peer == bob.session.myPeerID { return } } }
        result = await outcome { try await alice.browser.invite(bob.session.myPeerID, to: alice.session, context: nil, timeout: 5) }
        report(result == "unreachable", "vanished", result)

        await alice.stop()
        await bob.stop()
        guard failed.isEmpty else { fail("invitation scenarios failed: \(failed.joined(separator: ", "))") }
        print("INVITATIONS PASSED")
    }
}
