import MultipeerCrypto
import MultipeerSession
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import NIOPosix
import ProtocolTestSupport
import Testing
import MultipeerProtocol

@Suite("Session engine over loopback", .serialized)
struct SessionEngineTests {
    static let pki = try! TestPKI()

    @Test func twoPeersConnectByConnectionDataAndExchangeMessagesInOrder() async throws {
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try Self.pki.peer("bob"))
        #expect(try await alice.connect(bob))
        #expect(alice.states(of: bob) == [.connecting, .connected])
        #expect(bob.states(of: alice) == [.connecting, .connected])
        #expect(alice.engine.connectedPeers == [bob.peer])

        for index in 0..<100 { try bob.engine.send(ByteBuffer(string: "message \(index)"), to: [alice.peer.identifier]) }
        let big = ByteBuffer(repeating: 0x5A, count: 3 * 1_048_576 + 17)
        try alice.engine.send(big, to: [bob.peer.identifier])
        try alice.engine.send(ByteBuffer(), to: [bob.peer.identifier])
        #expect(try await eventually { alice.messages(from: bob).count == 100 && bob.messages(from: alice).count == 2 })
        #expect(alice.messages(from: bob).map { String(buffer: $0) } == (0..<100).map { "message \($0)" })
        #expect(bob.messages(from: alice) == [big, ByteBuffer()])
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Sends from many threads are batched onto the loop; each sender's order survives and
    /// nothing is lost or repeated.
    @Test func concurrentSendersKeepTheirOrder() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        #expect(try await alice.connect(bob))
        let senders = 4
        let perSender = 2_000
        let target = alice.peer.identifier
        await withTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                group.addTask {
                    for index in 0..<perSender {
                        var message = ByteBuffer()
                        message.writeInteger(UInt32(sender))
                        message.writeInteger(UInt32(index))
                        try? bob.engine.send(message, to: [target])
                    }
                }
            }
        }
        #expect(try await eventually { alice.messages(from: bob).count == senders * perSender })
        var next = [UInt32](repeating: 0, count: senders)
        for var message in alice.messages(from: bob) {
            let sender = Int(message.readInteger(as: UInt32.self)!)
            #expect(message.readInteger(as: UInt32.self) == next[sender])
            next[sender] += 1
        }
        #expect(next == [UInt32](repeating: UInt32(perSender), count: senders))
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func sendRefusesAtOnceWithoutSendingAnything() async throws {
        let alice = try EngineProbe(name: "alice")
        let stranger = Bytes16.random()
        #expect(throws: SessionSendError.noPeers) { try alice.engine.send(ByteBuffer(string: "x"), to: []) }
        #expect(throws: SessionSendError.notConnected([stranger])) { try alice.engine.send(ByteBuffer(string: "x"), to: [stranger]) }
        let huge = ByteBuffer(repeating: 0, count: WireLimits.maxMessageSize + 1)
        #expect(throws: SessionSendError.messageTooLarge(huge.readableBytes)) { try alice.engine.send(huge, to: [stranger]) }
    }

    @Test func connectionDataIsForOnePeerAndOneUse() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        let mallory = try EngineProbe(name: "mallory")
        let data = try await alice.engine.connectionData(forPeer: bob.peer.identifier).get()
        mallory.engine.connect(to: data)
        #expect(try await eventually { mallory.lastState(of: alice) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))) })
        #expect(alice.states(of: mallory).isEmpty)
        bob.engine.connect(to: data)
        #expect(try await eventually { bob.isConnected(to: alice) })
        await bob.shutdown()
        #expect(try await eventually { alice.lastState(of: bob) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))) })
        // The same blob again: the token was used up.
        bob.engine.connect(to: data)
        #expect(try await eventually { bob.lastState(of: alice) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))) })
        await alice.shutdown()
        await mallory.shutdown()
    }

    @Test func simultaneousConnectEndsInExactlyOneConnection() async throws {
        for _ in 0..<15 {
            let alice = try EngineProbe(name: "alice")
            let bob = try EngineProbe(name: "bob")
            let forBob = try await alice.engine.connectionData(forPeer: bob.peer.identifier).get()
            let forAlice = try await bob.engine.connectionData(forPeer: alice.peer.identifier).get()
            // Each dials through a relay that tells when a connection has been let go of at both ends.
            let toAlice = try await TCPRelay(to: Int(forBob.endpoints[0].port))
            let toBob = try await TCPRelay(to: Int(forAlice.endpoints[0].port))
            bob.engine.connect(to: try toAlice.rewrite(forBob))
            alice.engine.connect(to: try toBob.rewrite(forAlice))
            // Both dials arrived, and one of the two connections, the duplicate, has been closed by
            // both engines. A hop through each engine's loop then lets anything that close makes
            // them report be reported: no waiting and hoping that 100 ms was long enough.
            // One survivor either way: both dials went through and one was closed, or (under
            // load) the first finished before the second side acted, which then did not dial.
            func oneSurvivor() -> Bool {
                let (opened, finished) = (toAlice.opened + toBob.opened, toAlice.finished + toBob.finished)
                return (opened == 2 && finished == 1) || (opened == 1 && finished == 0)
            }
            let settled = try await eventually { alice.isConnected(to: bob) && bob.isConnected(to: alice) && oneSurvivor() }
            #expect(settled, "relayed \(toAlice.opened + toBob.opened) connections, \(toAlice.finished + toBob.finished) ended")
            try await alice.engine.eventLoop.submit {}.get()
            try await bob.engine.eventLoop.submit {}.get()
            #expect(alice.states(of: bob) == [.connecting, .connected])
            #expect(bob.states(of: alice) == [.connecting, .connected])
            #expect(oneSurvivor())
            try alice.engine.send(ByteBuffer(string: "still here"), to: [bob.peer.identifier])
            #expect(try await eventually { bob.messages(from: alice).count == 1 })
            await alice.shutdown()
            await bob.shutdown()
            await toAlice.close()
            await toBob.close()
        }
    }

    @Test func disconnectReportsEveryPeerAndTheEngineCanBeUsedAgain() async throws {
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        let carol = try EngineProbe(name: "carol")
        try await alice.accept(bob)
        try await alice.accept(carol)
        #expect(try await eventually { alice.engine.connectedPeers.count == 2 })
        await alice.shutdown()
        #expect(alice.lastState(of: bob) == .notConnected(ConnectionError(.closedLocally)))
        #expect(alice.lastState(of: carol) == .notConnected(ConnectionError(.closedLocally)))
        #expect(alice.engine.connectedPeers.isEmpty)
        #expect(try await eventually { bob.lastState(of: alice) == .notConnected(ConnectionError(.peerSaidGoodbye(.normal))) })
        // Reusable: a fresh blob, a fresh listener.
        #expect(try await alice.connect(bob))
        await alice.shutdown()
        await bob.shutdown()
        await carol.shutdown()
    }

    @Test func trustRejectionLeavesBothNotConnected() async throws {
        let alice = try EngineProbe(name: "alice", identity: try Self.pki.peer("alice"))
        let bob = try EngineProbe(name: "bob", identity: try TestPKI(name: "Rogue").peer("bob"))
        alice.trust { request in TrustEvaluation(anchors: [Self.pki.root]).evaluate(request.certificateChain ?? []).isTrusted }
        try await alice.accept(bob)
        #expect(try await eventually { bob.lastState(of: alice) == .notConnected(ConnectionError(.trustRejectedByPeer(.rejected))) })
        #expect(try await eventually { alice.lastState(of: bob) == .notConnected(ConnectionError(.trustRejectedLocally)) })
        #expect(!alice.states(of: bob).contains(.connected))
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aNinthMemberIsRefusedOnBothSides() async throws {
        let hub = try EngineProbe(name: "hub", preference: .none)
        var members: [EngineProbe] = []
        for index in 0..<7 {
            let member = try EngineProbe(name: "member\(index)", preference: .none)
            try await hub.accept(member)
            members.append(member)
        }
        #expect(try await eventually { hub.engine.connectedPeers.count == 7 })
        let ninth = try EngineProbe(name: "ninth", preference: .none)
        try await hub.accept(ninth)
        #expect(try await eventually { ninth.lastState(of: hub) == .notConnected(ConnectionError(.peerSaidGoodbye(.sessionFull))) })
        #expect(hub.states(of: ninth).isEmpty)
        #expect(hub.refusals(of: ninth) == [.sessionFull])
        #expect(hub.engine.connectedPeers.count == 7)
        for member in members + [hub, ninth] { await member.shutdown() }
    }

    @Test func fullMeshOfEight() async throws {
        let peers = try (0..<8).map { try EngineProbe(name: "peer\($0)", identity: try Self.pki.peer("peer\($0)")) }
        for (index, listener) in peers.enumerated() {
            for dialer in peers[(index + 1)...] { try await listener.accept(dialer) }
        }
        let meshed = try await eventually(seconds: 20) { peers.allSatisfy { $0.engine.connectedPeers.count == 7 } }
        let missing = peers.flatMap { a in
            peers.filter { b in a !== b && !a.isConnected(to: b) }.map { b in "\(a.peer.displayName)->\(b.peer.displayName): \(a.states(of: b))" }
        }
        #expect(meshed, "unconnected pairs: \(missing)")
        for peer in peers {
            #expect(Set(peer.engine.connectedPeers) == Set(peers.filter { $0 !== peer }.map(\.peer)))
            try peer.engine.send(ByteBuffer(string: "from \(peer.peer.displayName)"), to: peers.filter { $0 !== peer }.map(\.peer.identifier))
        }
        #expect(try await eventually { peers.allSatisfy { receiver in peers.allSatisfy { sender in sender === receiver || receiver.messages(from: sender).count == 1 } } })
        for receiver in peers {
            for sender in peers where sender !== receiver {
                #expect(receiver.messages(from: sender).map { String(buffer: $0) } == ["from \(sender.peer.displayName)"])
            }
        }
        for peer in peers { await peer.shutdown() }
    }
}

@Suite("Mesh formation by introduction (docs/PROTOCOL.md §7.4)", .serialized)
struct MeshIntroductionTests {
    @Test func joiningOneMemberConnectsTheNewcomerToEveryone() async throws {
        let hub = try EngineProbe(name: "hub")
        var members: [EngineProbe] = []
        for index in 0..<7 {
            let member = try EngineProbe(name: "member\(index)")
            try await hub.accept(member)
            members.append(member)
            // Each joiner is introduced to those already there.
            let everyone = [hub] + members
            #expect(try await eventually(seconds: 15) { everyone.allSatisfy { $0.engine.connectedPeers.count == everyone.count - 1 } },
                "after \(members.count) joined: \(everyone.map { $0.engine.connectedPeers.count })")
        }
        // Every state change once: each member saw each other member connect exactly once.
        for member in members {
            for other in members where other !== member {
                #expect(member.states(of: other) == [.connecting, .connected])
            }
        }
        try members[6].engine.send(ByteBuffer(string: "hello mesh"), to: members[0..<6].map(\.peer.identifier))
        #expect(try await eventually { members[0..<6].allSatisfy { $0.messages(from: members[6]).count == 1 } })
        for peer in members + [hub] { await peer.shutdown() }
    }

    @Test func aForgedIntroductionClaimIsRefused() async throws {
        // Mallory dials Bob claiming Alice introduced her; Alice never did.
        let alice = try EngineProbe(name: "alice")
        let bob = try EngineProbe(name: "bob")
        try await alice.accept(bob)
        #expect(try await eventually { bob.isConnected(to: alice) })
        let mallory = try EngineProbe(name: "mallory")
        let bobData = try await bob.engine.connectionData(forPeer: alice.peer.identifier).get()
        let forged = try ConnectionData(
            encryptionPreference: .required, token: alice.peer.identifier, forPeer: mallory.peer.identifier,
            peerID: bob.peer, certificateFingerprint: nil, endpoints: bobData.endpoints)
        mallory.engine.connect(to: forged)  // token = alice's identifier, as a mesh dial would carry
        #expect(try await eventually { mallory.lastState(of: bob) == .notConnected(ConnectionError(.peerSaidGoodbye(.unknownToken))) })
        #expect(bob.states(of: mallory).isEmpty)
        for peer in [alice, bob, mallory] { await peer.shutdown() }
    }
}

@Suite("Denial of service on the listener (security catalogue item 11)", .serialized)
struct ListenerFloodTests {
    /// Hundreds of idle and trickling connections must not keep a real peer out.
    @Test func idleAndTricklingClientsDoNotLockOutARealPeer() async throws {
        // The peers get a loop of their own, so the figure is about the idle clients, not about
        // whatever other tests run on the shared loops at the same time.
        let peerGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let alice = try EngineProbe(name: "alice", eventLoop: peerGroup.next())
        let bob = try EngineProbe(name: "bob", eventLoop: peerGroup.next())
        let data = try await alice.engine.connectionData(forPeer: bob.peer.identifier).get()
        let port = Int(data.endpoints[0].port)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var attackers: [any Channel] = []
        for index in 0..<300 {
            // An attacker the listener has already closed (its handshake deadline passed on a
            // slow machine) is no failure of the library: count what got through.
            guard let channel = try? await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: port).get() else { continue }
            // A third of them trickle a valid-looking preamble one byte at a time, then stall.
            if index % 3 == 0 { try? await channel.writeAndFlush(ByteBuffer(bytes: [0x4D, 0x50])) }
            attackers.append(channel)
        }
        #expect(attackers.count >= 250, "only \(attackers.count) of 300 idle clients connected")
        let started = ContinuousClock.now
        bob.engine.connect(to: data)
        #expect(try await eventually(seconds: 2) { alice.isConnected(to: bob) && bob.isConnected(to: alice) })
        #expect(ContinuousClock.now - started < .seconds(2))
        for channel in attackers { try? await channel.close().get() }
        try await group.shutdownGracefully()
        await alice.shutdown()
        await bob.shutdown()
        try await peerGroup.shutdownGracefully()
    }
}
