import MultipeerDNS
import NIOCore
import Testing

@testable import MultipeerDiscovery
@testable import MultipeerProtocol

/// Unicast answers are budgeted per source address (`UnicastAnswerBudgets`): nobody can spend
/// another's, and a flood of sources holds a bounded table.
@Suite("Unicast answer budgets per source")
struct UnicastBudgetTests {
    static func legacyQuery(id: UInt16 = 7) throws -> DNSMessage {
        DNSMessage(id: id, isResponse: false, questions: [DNSQuestion(name: try ServiceType("chat").serviceName, type: .ptr)])
    }

    static func unicastAnswers(_ lan: VirtualLAN, from node: VirtualLAN.Node, to address: MDNSAddress, after count: Int) -> Int {
        lan.sent.dropFirst(count).filter { sent in
            guard sent.from == node.index, case .unicast(let source) = sent.packet.destination else { return false }
            return source.address == address
        }.count
    }

    @Test func oneSourceSpendingItsBudgetLeavesAnotherAnswered() throws {
        let (lan, a) = try OffLinkPacketTests.announced(seed: 41)
        let (greedy, polite) = (VirtualLAN.address(segment: 0, host: 50), VirtualLAN.address(segment: 0, host: 51))
        let before = lan.sent.count
        for _ in 0..<(UnicastAnswerBudgets.answersPerSecond * 2) {
            lan.inject(try Self.legacyQuery(), segment: 0, from: greedy, port: 40_000)
            lan.run(for: .milliseconds(5))
        }
        #expect(Self.unicastAnswers(lan, from: a, to: greedy, after: before) == UnicastAnswerBudgets.answersPerSecond)
        // Within the same second: the greedy source is refused, the polite one answered.
        lan.inject(try Self.legacyQuery(), segment: 0, from: greedy, port: 40_000)
        lan.inject(try Self.legacyQuery(), segment: 0, from: polite, port: 40_001)
        lan.run(for: .milliseconds(50))
        #expect(Self.unicastAnswers(lan, from: a, to: greedy, after: before) == UnicastAnswerBudgets.answersPerSecond)
        #expect(Self.unicastAnswers(lan, from: a, to: polite, after: before) == 1, "one source's flood silenced another")
    }

    /// A victim's budget cannot be reset by pushing it out of the table: the attacker spends 19
    /// of its answers, floods more forged on-link sources than the table holds, and asks as the
    /// victim again, all within one second. The victim still gets no more than its 20.
    @Test func evictingAVictimDoesNotResetItsBudget() throws {
        let (lan, a) = try OffLinkPacketTests.announced(seed: 44)
        let victim = VirtualLAN.address(segment: 0, host: 200)
        let before = lan.sent.count
        let start = lan.now
        for _ in 0..<(UnicastAnswerBudgets.answersPerSecond - 1) {
            lan.inject(try Self.legacyQuery(), segment: 0, from: victim, port: 40_000)
            lan.run(for: .milliseconds(2))
        }
        #expect(Self.unicastAnswers(lan, from: a, to: victim, after: before) == UnicastAnswerBudgets.answersPerSecond - 1)
        for host in 100..<(100 + UnicastAnswerBudgets.maxSources + 6) {
            lan.inject(try Self.legacyQuery(), segment: 0, from: VirtualLAN.address(segment: 0, host: host), port: 40_000)
            lan.run(for: .milliseconds(2))
        }
        for _ in 0..<UnicastAnswerBudgets.answersPerSecond {
            lan.inject(try Self.legacyQuery(), segment: 0, from: victim, port: 40_000)
            lan.run(for: .milliseconds(2))
        }
        #expect(lan.now - start < .seconds(1))
        #expect(
            Self.unicastAnswers(lan, from: a, to: victim, after: before) == UnicastAnswerBudgets.answersPerSecond,
            "the victim's budget was reset within its second")
    }

    /// 5,000 legacy queries in 5 s from 240 distinct sources: the table stays within its cap, no
    /// one-second span holds more than `totalPerSecond` unicast answers, and a QU querier asking
    /// every 2 s (as browsers back off) has each question answered, by unicast or, once refused,
    /// by multicast. (A legacy querier may be refused throughout: the flood holds the table and
    /// the total.)
    @Test func aFloodOfDistinctSourcesStaysWithinTheTableAndStarvesNoOne() throws {
        let (lan, a) = try OffLinkPacketTests.announced(seed: 42)
        let service = try ServiceType("chat").serviceName
        let qu = DNSMessage(isResponse: false, questions: [DNSQuestion(name: service, type: .ptr, unicastResponse: true)])
        let querier = VirtualLAN.address(segment: 0, host: 9)
        let before = lan.sent.count
        var asked = 0
        // Unicast answers per 10 ms step.
        var steps: [Int] = []
        var counted = before
        for index in 0..<5_000 {
            lan.inject(try Self.legacyQuery(), segment: 0, from: VirtualLAN.address(segment: 0, host: 10 + index % 240), port: 40_000)
            if index % 2_000 == 0 {
                lan.inject(qu, segment: 0, from: querier)
                asked += 1
            }
            if index % 10 == 9 {
                lan.run(for: .milliseconds(10))
                #expect(a.advertisers[0].unicastBudgetSourceCount <= UnicastAnswerBudgets.maxSources)
                steps.append(lan.sent.dropFirst(counted).count { sent in
                    guard sent.from == a.index, case .unicast = sent.packet.destination else { return false }
                    return true
                })
                counted = lan.sent.count
            }
        }
        lan.run(for: .milliseconds(200))
        // Any 100 steps span less than a second of answers: (t, t + 1 s].
        let busiest = steps.indices.map { steps[max(0, $0 - 99)...$0].reduce(0, +) }.max() ?? 0
        #expect(busiest <= UnicastAnswerBudgets.totalPerSecond, "\(busiest) unicast answers within a second")
        #expect(busiest >= UnicastAnswerBudgets.totalPerSecond / 2, "the flood got few answers (\(busiest)): the test shows nothing")
        let multicast = lan.sent.dropFirst(before).filter { sent in
            guard sent.from == a.index, case .multicast = sent.packet.destination else { return false }
            return sent.packet.message.answers.contains { $0.name == service }
        }
        #expect(Self.unicastAnswers(lan, from: a, to: querier, after: before) + multicast.count == asked, "the QU querier was starved")
    }

    /// Sources that each keep within their budgets and fit the table still share one total.
    @Test func allSourcesTogetherGetAtMostTheTotalInASecond() {
        var budgets = UnicastAnswerBudgets()
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        let sources = UnicastAnswerBudgets.totalPerSecond / UnicastAnswerBudgets.answersPerSecond
        var granted = 0
        for source in 0..<sources {
            for answer in 0..<UnicastAnswerBudgets.answersPerSecond where budgets.spend(to: .ipv4(UInt32(source)), now: start + .milliseconds(Int64(answer))) {
                granted += 1
            }
        }
        #expect(granted == UnicastAnswerBudgets.totalPerSecond)
        let newcomer = MDNSAddress.ipv4(0xFFFF)
        let withinTheSecond = budgets.spend(to: newcomer, now: start + .milliseconds(999))
        #expect(!withinTheSecond, "past the total within one second")
        let afterIt = budgets.spend(to: newcomer, now: start + .seconds(1))
        #expect(afterIt, "refused after the second")
    }

    /// When the table is full of sources still in their one-second windows, a new one is refused a
    /// unicast answer: a legacy querier gets nothing, a QU querier (listening on 5353) the multicast answer.
    @Test func aSourceThatDoesNotFitGetsTheMulticastAnswerToAQUQuestion() throws {
        let (lan, a) = try OffLinkPacketTests.announced(seed: 43)
        var budgets = UnicastAnswerBudgets()
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        // One answer each fills the table: none of them may go before its second ends.
        let granted = (0..<UnicastAnswerBudgets.maxSources).count { budgets.spend(to: .ipv4(UInt32($0)), now: now) }
        #expect(granted == UnicastAnswerBudgets.maxSources)
        let refused = !budgets.spend(to: .ipv4(0xFFFF), now: now + .milliseconds(500))
        #expect(refused)
        #expect(budgets.trackedSourceCount == UnicastAnswerBudgets.maxSources)
        // A second later their windows have ended and they make way.
        let admitted = budgets.spend(to: .ipv4(0xFFFF), now: now + .seconds(1))
        #expect(admitted && budgets.trackedSourceCount == UnicastAnswerBudgets.maxSources)

        // Through the core: a QU question from a source over its budget is answered by multicast.
        let querier = VirtualLAN.address(segment: 0, host: 60)
        let service = try ServiceType("chat").serviceName
        let qu = DNSMessage(isResponse: false, questions: [DNSQuestion(name: service, type: .ptr, unicastResponse: true)])
        let before = lan.sent.count
        for _ in 0..<UnicastAnswerBudgets.answersPerSecond {
            lan.inject(qu, segment: 0, from: querier)
            lan.run(for: .milliseconds(5))
        }
        #expect(Self.unicastAnswers(lan, from: a, to: querier, after: before) == UnicastAnswerBudgets.answersPerSecond)
        lan.inject(qu, segment: 0, from: querier)
        lan.run(for: .milliseconds(200))
        let multicast = lan.sent.dropFirst(before).filter { sent in
            guard sent.from == a.index, case .multicast = sent.packet.destination else { return false }
            return sent.packet.message.answers.contains { $0.name == service }
        }
        #expect(multicast.count == 1, "the refused QU question got no multicast answer")
        #expect(Self.unicastAnswers(lan, from: a, to: querier, after: before) == UnicastAnswerBudgets.answersPerSecond)
    }
}
