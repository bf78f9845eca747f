import MultipeerDNS
import MultipeerTestSupport
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// Known answers that do not fit one packet (RFC 6762 §7.2): the browser continues them in
/// packets with TC, the responder waits 400-500 ms for them, within fixed bounds.
@Suite("Multi-packet known-answer suppression")
struct MultiPacketKnownAnswerTests {
    static let service = try! ServiceType("chat").serviceName
    static let spoofer = MDNSAddress.ipv4(0x0A00_0063)

    static func fakeInstances(_ lan: VirtualLAN, count: Int) throws -> [DNSName] {
        try (0..<count).map { try service.prepending(DiscoveryTXT.hex(lan.peer("fake\($0)").identifier)) }
    }

    static func ptr(_ instance: DNSName, ttl: UInt32 = 4_500) -> DNSResourceRecord {
        DNSResourceRecord(name: service, ttl: ttl, data: .ptr(instance))
    }

    static func size(_ message: DNSMessage) throws -> Int { try message.encoded().readableBytes }

    @Test func aBrowserHolding200InstancesSendsItsKnownAnswersInPacketsWithinTheBudget() throws {
        let lan = VirtualLAN(seed: 21)
        let b = lan.addNode()
        try lan.browse(on: b)
        let instances = try Self.fakeInstances(lan, count: 200)
        for start in stride(from: 0, to: 200, by: 50) {
            let answers = instances[start..<start + 50].map { Self.ptr($0) }
            lan.inject(DNSMessage(isResponse: true, isAuthoritative: true, answers: answers), segment: 0, from: Self.spoofer)
        }
        let injected = lan.sent.count
        lan.run(for: .seconds(10))
        let fromB = lan.sent.dropFirst(injected).filter { $0.from == b.index }.map(\.packet.message)
        // Everything the browser sends keeps to the budget, its resolve queries for 200 names too.
        for message in fromB { #expect(try Self.size(message) <= MDNS.ipv4QueryBudget) }
        // Each PTR query with its continuations: the packet with the question and those without questions after it.
        var runs: [[DNSMessage]] = []
        for message in fromB {
            if message.questions.contains(where: { $0.name == Self.service && $0.type == .ptr }) {
                runs.append([message])
            } else if message.questions.isEmpty, !runs.isEmpty {
                runs[runs.count - 1].append(message)
            }
        }
        #expect(runs.count >= 2, "PTR queries at 3 s and 7 s at least")
        for run in runs {
            #expect(run.count >= 6, "200 PTRs of about 47 bytes each need at least 6 packets: \(run.count)")
            #expect(run.dropLast().allSatisfy(\.isTruncated) && run.last?.isTruncated == false)
            #expect(run.dropFirst().allSatisfy { $0.questions.isEmpty })
            for message in run { #expect(try DNSMessage.decode(try message.encoded()) == message) }
            let carried = run.flatMap(\.answers)
            #expect(carried.count == 200)
            #expect(Set(carried.compactMap { if case .ptr(let instance) = $0.data { instance } else { nil } }) == Set(instances))
            // As many as fit: the next packet's first record would not have fitted in the one before.
            for (packet, next) in zip(run, run.dropFirst()) {
                var fuller = packet
                fuller.answers.append(next.answers[0])
                #expect(try Self.size(fuller) > MDNS.ipv4QueryBudget)
            }
        }
    }

    @Test func manyLongQuestionsAreSplitIntoPacketsWithinTheBudget() throws {
        let questions = try (0..<64).map { DNSQuestion(name: try Self.service.prepending(String(repeating: "q", count: 40) + "\($0)"), type: .srv) }
        let packets = QueryPacking.packets(questions: questions, knownAnswers: [], budget: MDNS.ipv6QueryBudget)
        #expect(packets.count >= 2)
        #expect(packets.flatMap(\.questions) == questions)
        for packet in packets {
            #expect(try Self.size(packet) <= MDNS.ipv6QueryBudget)
            #expect(!packet.isTruncated && packet.answers.isEmpty)
        }
    }

    /// Alice's advertiser, announced and past its one-second rate limit, on a LAN with a querier.
    static func announcedAdvertiser(seed: UInt64) throws -> (VirtualLAN, VirtualLAN.Node) {
        let lan = VirtualLAN(seed: seed)
        let a = lan.addNode()
        try lan.advertise(on: a, peer: lan.peer("Alice"))
        lan.run(for: .seconds(5))
        return (lan, a)
    }

    /// A PTR query in three packets from one source: TC on the first two, the third with
    /// `last` among its known answers.
    static func injectThreePacketQuery(_ lan: VirtualLAN, last: [DNSResourceRecord]) throws {
        let fakes = try fakeInstances(lan, count: 90).map { ptr($0) }
        lan.inject(
            DNSMessage(isResponse: false, isTruncated: true, questions: [DNSQuestion(name: service, type: .ptr)], answers: Array(fakes[0..<30])),
            segment: 0, from: spoofer)
        lan.inject(DNSMessage(isResponse: false, isTruncated: true, answers: Array(fakes[30..<60])), segment: 0, from: spoofer)
        lan.inject(DNSMessage(isResponse: false, answers: Array(fakes[60..<90]) + last), segment: 0, from: spoofer)
    }

    static func ptrAnswers(_ lan: VirtualLAN, from node: VirtualLAN.Node, after: Int) -> Int {
        lan.sent.dropFirst(after).filter { $0.from == node.index && $0.packet.message.answers.contains { $0.name == service && $0.type == .ptr } }.count
    }

    @Test func aResponderWhoseRecordIsInTheThirdPacketDoesNotAnswer() throws {
        let (lan, a) = try Self.announcedAdvertiser(seed: 22)
        let before = lan.sent.count
        try Self.injectThreePacketQuery(lan, last: [Self.ptr(a.advertisers[0].instanceName)])
        lan.run(for: .seconds(2))
        #expect(Self.ptrAnswers(lan, from: a, after: before) == 0)
        #expect(a.advertisers[0].heldTruncatedQueryCount == 0)
    }

    @Test(arguments: 31...34 as ClosedRange<UInt64>)
    func aResponderWhoseRecordIsAbsentAnswersAfter400To500Milliseconds(seed: UInt64) throws {
        let (lan, a) = try Self.announcedAdvertiser(seed: seed)
        let before = lan.sent.count
        let sent = lan.now
        // Its PTR with less than half its TTL left does not count as known (RFC 6762 §7.1).
        try Self.injectThreePacketQuery(lan, last: [Self.ptr(a.advertisers[0].instanceName, ttl: 100)])
        #expect(lan.run(until: { Self.ptrAnswers(lan, from: a, after: before) > 0 }, limit: .seconds(2)))
        // One millisecond on the wire, then the wait.
        let waited = lan.now - sent - lan.latency
        #expect(waited >= .milliseconds(400) && waited <= .milliseconds(500), "answered after \(waited)")
        lan.run(for: .seconds(2))
        #expect(Self.ptrAnswers(lan, from: a, after: before) == 1)
    }

    /// 2,000 queries with TC in 4 s from 200 spoofed sources and one heavy one, each followed by
    /// known answers (ours with a short TTL among strangers'): what is held stays capped, jobs
    /// do not grow, the responder keeps answering about once a second (its rate limit, no more),
    /// and a browser that starts during the flood finds the peer as fast as without one.
    @Test func aFloodOfTruncatedQueriesStaysBoundedAndDoesNotSilenceTheResponder() throws {
        let (lan, a) = try Self.announcedAdvertiser(seed: 23)
        let b = lan.addNode()
        let alice = a.advertisers[0].peer
        let ourRecords = a.advertisers[0].records(interfaceIndex: 1, ipv6: false)
        let strangers = try Self.fakeInstances(lan, count: 10).map { Self.ptr($0) }
        let heavy = MDNSAddress.ipv4(0x0A00_00FE)
        let before = lan.sent.count
        var browseStarted: NIODeadline?
        var checkedFound = false
        for index in 0..<2_000 {
            // On segment 0's subnet, so that the on-link rule (RFC 6762 §11) lets them all in.
            let source = index % 4 == 0 ? heavy : VirtualLAN.address(segment: 0, host: 20 + index % 200)
            lan.inject(
                DNSMessage(isResponse: false, isTruncated: true, questions: [DNSQuestion(name: Self.service, type: .ptr)], answers: strangers),
                segment: 0, from: source)
            let ours = ourRecords.map { var record = $0; record.ttl = 1; return record }
            lan.inject(DNSMessage(isResponse: false, answers: strangers + ours), segment: 0, from: source)
            guard index % 5 == 4 else { continue }
            lan.run(for: .milliseconds(10))
            let core = a.advertisers[0]
            #expect(core.heldTruncatedQueryCount <= TruncatedQueries.maxTotal)
            #expect(core.heldTruncatedQueryCount(from: MDNSSource(address: heavy, port: MDNS.port, interfaceIndex: 1, sentToGroup: true)) <= TruncatedQueries.maxPerSource)
            #expect(core.heldKnownAnswerCount <= core.heldTruncatedQueryCount * ourRecords.count)
            #expect(core.pendingJobCount <= TruncatedQueries.maxTotal + 4, "\(core.pendingJobCount) jobs")
            if index == 499 {
                try lan.browse(on: b)
                browseStarted = lan.now
            }
            if let started = browseStarted, !checkedFound, lan.now - started >= .seconds(1) {
                checkedFound = true
                #expect(b.found == [alice], "not found within 1 s of browsing")
            }
        }
        #expect(checkedFound)
        let responses = Self.ptrAnswers(lan, from: a, after: before)
        #expect(responses >= 3 && responses <= 5, "\(responses) PTR answers in 4 s")
        lan.run(for: .seconds(1))
        #expect(a.advertisers[0].heldTruncatedQueryCount == 0)
    }
}
