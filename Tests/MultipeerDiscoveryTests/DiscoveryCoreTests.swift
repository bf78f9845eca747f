import MultipeerDNS
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// The advertiser and browser cores against each other on a virtual LAN (see VirtualLAN).
@Suite("Discovery cores on a virtual LAN")
struct DiscoveryCoreTests {
    @Test func aBrowserFindsAnAdvertiserWithinASecond() throws {
        let lan = VirtualLAN(seed: 1)
        let (a, b) = (lan.addNode(), lan.addNode())
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice, port: 7123, info: ["room": "42", "colour": "blue"])
        try lan.browse(on: b)
        let started = lan.now
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        #expect(lan.now - started < .seconds(1), "found after \(lan.now - started)")
        guard case .found(let found) = b.browserEvents.first else { return }
        #expect(found.peer == alice)
        #expect(found.discoveryInfo == ["room": "42", "colour": "blue"])
        #expect(found.endpoints == [.init(address: a.address(on: 1), port: 7123, interfaceIndex: 1)])
        lan.run(for: .seconds(30))
        #expect(b.browserEvents.count == 1, "one found, nothing else: \(b.browserEvents)")
    }

    @Test func aBrowserStartedAfterTheAdvertiserFindsItToo() throws {
        let lan = VirtualLAN(seed: 2)
        let (a, b) = (lan.addNode(), lan.addNode())
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        lan.run(for: .seconds(10))
        try lan.browse(on: b)
        let started = lan.now
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        #expect(lan.now - started < .seconds(1))
    }

    @Test func aGoodbyeIsLostWithinASecond() throws {
        let lan = VirtualLAN(seed: 3)
        let (a, b) = (lan.addNode(), lan.addNode())
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice)
        try lan.browse(on: b)
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        lan.run(for: .seconds(3))
        lan.stopAdvertising(on: a)
        let stopped = lan.now
        #expect(lan.run(until: { b.found.isEmpty }, limit: .seconds(5)))
        #expect(lan.now - stopped < .seconds(1))
        #expect(b.browserEvents.last == .lost(alice))
    }

    @Test func anAdvertiserThatVanishesIsLostWithinTheLivenessTimeout() throws {
        let lan = VirtualLAN(seed: 4)
        let (a, b) = (lan.addNode(), lan.addNode())
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        try lan.browse(on: b)
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        lan.run(for: .seconds(2))
        a.isReachable = false  // killed: no goodbye
        let vanished = lan.now
        let timeout = MDNSBrowserCore.Limits().livenessTimeout
        #expect(lan.run(until: { b.found.isEmpty }, limit: .seconds(60)))
        #expect(lan.now - vanished <= timeout + .seconds(1), "lost after \(lan.now - vanished)")
        // A peer that keeps answering is never lost: the browser on a third node keeps Bob.
        let c = lan.addNode()
        let bob = lan.peer("Bob")
        try lan.advertise(on: c, peer: bob)
        #expect(lan.run(until: { b.found == [bob] }, limit: .seconds(5)))
        lan.run(for: .seconds(120))
        #expect(b.found == [bob])
    }

    @Test func peersWithTheSameDisplayNameAreDistinct() throws {
        let lan = VirtualLAN(seed: 5)
        let (a, c, b) = (lan.addNode(), lan.addNode(), lan.addNode())
        let first = lan.peer("Phone")
        let second = lan.peer("Phone")
        try lan.advertise(on: a, peer: first)
        try lan.advertise(on: c, peer: second)
        try lan.browse(on: b)
        #expect(lan.run(until: { b.found.count == 2 }, limit: .seconds(5)))
        #expect(Set(b.found) == [first, second])
        #expect(a.advertiserEvents == [.announced] && c.advertiserEvents == [.announced])
    }

    /// The same peer advertised from two hosts (a restarted process whose old records linger, or
    /// a spoofer): probing finds the conflict, one side renames, and browsers report the peer once.
    @Test func aNameConflictIsResolvedByRenaming() throws {
        let lan = VirtualLAN(seed: 6)
        let (a, c, b) = (lan.addNode(), lan.addNode(), lan.addNode())
        let twin = lan.peer("Twin")
        try lan.advertise(on: a, peer: twin, port: 7001)
        lan.run(for: .seconds(3))
        try lan.advertise(on: c, peer: twin, port: 7002)
        lan.run(for: .seconds(5))
        guard case .renamed(let renamed) = c.advertiserEvents.first else {
            Issue.record("expected the late advertiser to rename: \(c.advertiserEvents)")
            return
        }
        #expect(renamed.labels[0] == Array((DiscoveryTXT.hex(twin.identifier) + "-2").utf8))
        #expect(c.advertiserEvents.last == .announced)
        try lan.browse(on: b)
        lan.run(for: .seconds(5))
        #expect(b.found == [twin])
        #expect(b.browserEvents.filter { !$0.isMove }.count == 1)
    }

    /// One peer on two interfaces of the browser's host: found once, with both endpoints.
    @Test func aPeerSeenOnTwoInterfacesIsFoundOnce() throws {
        let lan = VirtualLAN(seed: 7)
        let a = lan.addNode(segments: [1: 0, 2: 1])
        let b = lan.addNode(segments: [1: 0, 2: 1])
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice)
        try lan.browse(on: b)
        lan.run(for: .seconds(5))
        // Found once; its second interface's address may come later, as a move.
        #expect(b.browserEvents.filter { !$0.isMove }.count == 1)
        let endpoints = b.browsers[0].foundPeers.first?.endpoints ?? []
        #expect(Set(endpoints.map(\.interfaceIndex)) == [1, 2])
    }

    @Test func aBrowserNeverReportsItsOwnPeer() throws {
        let lan = VirtualLAN(seed: 8)
        let a = lan.addNode()
        let me = lan.peer("Me")
        try lan.advertise(on: a, peer: me)
        try lan.browse(on: a, localIdentifier: me.identifier)
        lan.run(for: .seconds(5))
        #expect(a.browserEvents.isEmpty)
    }

    /// A browser that already holds the answer says so, and the responder stays quiet.
    @Test func knownAnswersSuppressRepeatedResponses() throws {
        let lan = VirtualLAN(seed: 9)
        let (a, b) = (lan.addNode(), lan.addNode())
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        lan.run(for: .seconds(5))
        try lan.browse(on: b)
        lan.run(for: .seconds(5))
        let service = try ServiceType("chat").serviceName
        func ptrAnswers() -> Int {
            lan.sent.filter { $0.from == a.index && $0.packet.message.answers.contains { $0.name == service && $0.type == .ptr } }.count
        }
        func ptrQueries() -> [DNSMessage] {
            lan.sent.filter { $0.from == b.index && $0.packet.message.questions.contains { $0.name == service } }.map(\.packet.message)
        }
        let answersBefore = ptrAnswers()
        let queriesBefore = ptrQueries().count
        // Queries keep coming (at 1, 2, 4, 8, 16, 32 s ...), each with the PTR as a known answer.
        lan.run(for: .seconds(60))
        let queries = ptrQueries().dropFirst(queriesBefore)
        #expect(queries.count >= 4)
        #expect(queries.allSatisfy { $0.answers.contains { $0.name == service && $0.type == .ptr } })
        #expect(ptrAnswers() == answersBefore, "the responder answered a query that already held its answer")
    }

    /// A flood of queries does not make the responder multicast a record more than once a second.
    @Test func aQueryFloodIsRateLimited() throws {
        let lan = VirtualLAN(seed: 10)
        let (a, _) = (lan.addNode(), lan.addNode())
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        lan.run(for: .seconds(5))
        let before = lan.sent.filter { $0.from == a.index }.count
        let query = DNSMessage(isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
        for _ in 0..<1_000 {
            lan.inject(query, segment: 0, from: .ipv4(0x0A00_00FE))
            lan.run(for: .milliseconds(10))  // 100 queries a second for 10 s
        }
        let responses = lan.sent.filter { $0.from == a.index }.count - before
        #expect(responses <= 11, "\(responses) responses in 10 s")
        #expect(responses >= 9)
    }

    /// 10,000 spoofed instances: the cache stays within its caps, and a peer found before the
    /// flood stays found.
    @Test func aFloodOfSpoofedAdvertisementsStaysWithinTheCaps() throws {
        let lan = VirtualLAN(seed: 11)
        let (a, b) = (lan.addNode(), lan.addNode())
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice)
        var limits = MDNSBrowserCore.Limits()
        limits.maxInstances = 64
        limits.maxRecords = 512
        try lan.browse(on: b, limits: limits)
        #expect(lan.run(until: { b.found == [alice] }, limit: .seconds(5)))
        let service = try ServiceType("chat").serviceName
        for index in 0..<10_000 {
            let fake = lan.peer("fake\(index)")
            let instance = try service.prepending(DiscoveryTXT.hex(fake.identifier))
            let host = try DNSName("h\(index).local")
            let records = [
                DNSResourceRecord(name: service, ttl: 4_500, data: .ptr(instance)),
                DNSResourceRecord(name: instance, ttl: 120, data: .srv(priority: 0, weight: 0, port: 9, target: host), cacheFlush: true),
                DNSResourceRecord(name: instance, ttl: 4_500, data: .txt(try DiscoveryTXT.encode(fake, info: [:])), cacheFlush: true),
                DNSResourceRecord(name: host, ttl: 120, data: .a(0x0A00_0063), cacheFlush: true),
            ]
            lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: records), segment: 0, from: .ipv4(0x0A00_0063))
            if index % 100 == 99 { lan.run(for: .milliseconds(100)) }
        }
        lan.run(for: .seconds(1))
        #expect(b.browsers[0].cachedRecordCount <= limits.maxRecords)
        #expect(b.found.count <= limits.maxInstances)
        #expect(b.found.contains(alice))
    }
}

/// A found peer's host announces another address (it moved): the browser says so once, without
/// losing and finding the peer again, so sessions can redial it there (docs/PROTOCOL.md §7.9).
@Suite("Discovery cores: a found peer that moves")
struct DiscoveryCoreMoveTests {
    @Test func aNewAddressForAFoundPeerIsReportedAsAMove() throws {
        let lan = VirtualLAN(seed: 31)
        let b = lan.addNode()
        try lan.browse(on: b)
        let service = try ServiceType("chat").serviceName
        let mover = lan.peer("mover")
        let instance = try service.prepending(DiscoveryTXT.hex(mover.identifier))
        let host = try DNSName("mover.local")
        func announce(_ address: UInt32) {
            let records = [
                DNSResourceRecord(name: service, ttl: 4_500, data: .ptr(instance)),
                DNSResourceRecord(name: instance, ttl: 120, data: .srv(priority: 0, weight: 0, port: 9, target: host), cacheFlush: true),
                DNSResourceRecord(name: instance, ttl: 4_500, data: .txt(try! DiscoveryTXT.encode(mover, info: [:])), cacheFlush: true),
                DNSResourceRecord(name: host, ttl: 120, data: .a(address), cacheFlush: true),
            ]
            lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: records), segment: 0, from: .ipv4(address))
        }
        announce(0x0A00_0063)
        #expect(lan.run(until: { b.found == [mover] }, limit: .seconds(5)))
        lan.run(for: .seconds(2))
        announce(0x0A00_0064)
        // The cache flush retires the old address a second after the new one arrives.
        lan.run(for: .seconds(3))
        let moves = b.browserEvents.compactMap { event -> [MDNSAddress]? in
            guard case .moved(let found) = event else { return nil }
            return found.endpoints.map(\.address)
        }
        #expect(moves.last == [.ipv4(0x0A00_0064)], "\(b.browserEvents)")
        #expect(b.browserEvents.filter { if case .found = $0 { true } else { false } }.count == 1)
        #expect(!b.browserEvents.contains { if case .lost = $0 { true } else { false } })
        // The same announcement again changes nothing.
        let count = b.browserEvents.count
        announce(0x0A00_0064)
        lan.run(for: .seconds(3))
        #expect(b.browserEvents.count == count)
    }
}

@Suite("Discovery cores: the rules a review found untested")
struct DiscoveryCoreRuleTests {
    /// Two hosts start advertising the same peer at the same moment: the probe tie-break makes
    /// exactly one of them rename (RFC 6762 §8.2), and a browser reports the peer once.
    @Test(arguments: 1...8)
    func simultaneousProbesForOneNameEndWithOneRename(seed: UInt64) throws {
        let lan = VirtualLAN(seed: seed)
        let (a, c, b) = (lan.addNode(), lan.addNode(), lan.addNode())
        let twin = lan.peer("Twin")
        try lan.advertise(on: a, peer: twin, port: 7001)
        try lan.advertise(on: c, peer: twin, port: 7002)
        lan.run(for: .seconds(10))
        let renames = (a.advertiserEvents + c.advertiserEvents).filter { if case .renamed = $0 { true } else { false } }
        #expect(renames.count == 1, "seed \(seed): \(a.advertiserEvents) / \(c.advertiserEvents)")
        #expect(a.advertisers[0].phase == .running && c.advertisers[0].phase == .running)
        try lan.browse(on: b)
        lan.run(for: .seconds(5))
        #expect(b.found == [twin])
    }

    /// A goodbye clears every record of the peer from the cache, not only the one it found first.
    @Test func aGoodbyeLeavesNothingCached() throws {
        let lan = VirtualLAN(seed: 12)
        let (a, b) = (lan.addNode(), lan.addNode())
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        try lan.browse(on: b)
        #expect(lan.run(until: { !b.found.isEmpty }, limit: .seconds(5)))
        #expect(b.browsers[0].cachedRecordCount >= 4)
        lan.stopAdvertising(on: a)
        lan.run(for: .seconds(1))
        #expect(b.found.isEmpty)
        #expect(b.browsers[0].cachedRecordCount == 0)
    }

    /// A peer lost to an outage is found again soon after it comes back, although the browser's
    /// query backoff had grown long by then.
    @Test func aPeerLostToAnOutageIsFoundAgain() throws {
        let lan = VirtualLAN(seed: 13)
        let (a, b) = (lan.addNode(), lan.addNode())
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice)
        try lan.browse(on: b)
        lan.run(for: .seconds(120))  // the PTR backoff is past a minute now
        #expect(b.found == [alice])
        a.isReachable = false
        #expect(lan.run(until: { b.found.isEmpty }, limit: .seconds(30)))
        a.isReachable = true
        let back = lan.now
        #expect(lan.run(until: { b.found == [alice] }, limit: .seconds(30)))
        #expect(lan.now - back < .seconds(5), "found again after \(lan.now - back)")
    }

    /// After a flood of spoofed names that never resolve, a new real peer still gets in.
    @Test func aNewPeerGetsInAfterAFloodOfUnresolvedNames() throws {
        let lan = VirtualLAN(seed: 14)
        let b = lan.addNode()
        var limits = MDNSBrowserCore.Limits()
        limits.maxInstances = 32
        try lan.browse(on: b, limits: limits)
        let service = try ServiceType("chat").serviceName
        for index in 0..<1_000 {
            let instance = try service.prepending("spoof\(index)")
            lan.inject(DNSMessage(isResponse: true, answers: [DNSResourceRecord(name: service, ttl: 4_500, data: .ptr(instance))]), segment: 0, from: .ipv4(0x0A00_0063))
            if index % 50 == 49 { lan.run(for: .milliseconds(100)) }
        }
        lan.run(for: .seconds(6))
        let a = lan.addNode()
        let alice = lan.peer("Alice")
        try lan.advertise(on: a, peer: alice)
        #expect(lan.run(until: { b.found == [alice] }, limit: .seconds(10)))
    }
}

extension DiscoveryCoreRuleTests {
    /// A flood of rival probes and conflicting answers while we probe: one reaction per probe
    /// round, so the job queue stays small and renames stay few.
    @Test func aFloodOfRivalProbesAndConflictsAddsNoJobs() throws {
        let lan = VirtualLAN(seed: 15)
        let a = lan.addNode()
        let victim = lan.peer("Victim")
        try lan.advertise(on: a, peer: victim)
        for index in 0..<2_000 {
            // Always aimed at the name the advertiser uses now, renamed or not.
            let instance = a.advertisers[0].instanceName
            let rival = DNSResourceRecord(name: instance, ttl: 120, data: .txt([Array("z=\(String(repeating: "z", count: 200))".utf8)]), cacheFlush: true)
            let message = index % 2 == 0
                ? DNSMessage(isResponse: false, questions: [DNSQuestion(name: instance, type: .any)], authorities: [rival])
                : DNSMessage(isResponse: true, isAuthoritative: true, answers: [rival])
            lan.inject(message, segment: 0, from: .ipv4(0x0A00_0063))
            if index % 100 == 99 {
                lan.run(for: .milliseconds(50))
                #expect(a.advertisers[0].pendingJobCount <= 4, "\(a.advertisers[0].pendingJobCount) jobs")
            }
        }
        let renames = a.advertiserEvents.filter { if case .renamed = $0 { true } else { false } }.count
        // 2,000 packets over 1 s: at most one reaction per probe round (250 ms apart).
        #expect(renames <= 8, "\(renames) renames")
    }
}
