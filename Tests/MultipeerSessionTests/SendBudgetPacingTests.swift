import MultipeerTestSupport
import MultipeerWire
import Testing

@testable import MultipeerSession

/// An async sender on the network thread waits while a peer's queue is above the pace limit,
/// and goes on as soon as it is back under: a task there that never suspends would keep every
/// unacknowledged message in memory, since the thread reads no acknowledgement meanwhile.
@Suite struct SendBudgetPacingTests {
    static let peer = try! WirePeerID(identifier: Bytes16(high: 7, low: 7), displayName: "p")
    static var id: Bytes16 { peer.identifier }

    @Test func aSenderAboveThePaceLimitWaitsUntilItIsBackUnder() async throws {
        let budget = SendBudget(limitPerPeer: 64 << 10)
        budget.add(Self.peer, acceptsDatagrams: false)
        try budget.reserve(budget.paceLimit, for: [Self.id])
        // At the limit, not above it: no wait.
        try await withDeadline(seconds: 10) { await budget.waitForAcknowledgements(for: [Self.id]) }
        try budget.reserve(2, for: [Self.id])
        let waiting = Task { await budget.waitForAcknowledgements(for: [Self.id]) }
        try #require(try await eventually { budget.pacerCount(for: Self.id) == 1 })
        // Still above the limit: still waiting.
        budget.release(1, for: Self.id)
        #expect(budget.pacerCount(for: Self.id) == 1)
        budget.release(1, for: Self.id)
        #expect(budget.pacerCount(for: Self.id) == 0)
        try await withDeadline(seconds: 10) { await waiting.value }
    }

    @Test func aPeerThatLeavesReleasesItsPacers() async throws {
        let budget = SendBudget(limitPerPeer: 64 << 10)
        budget.add(Self.peer, acceptsDatagrams: false)
        try budget.reserve(budget.paceLimit + 1, for: [Self.id])
        let waiting = Task { await budget.waitForAcknowledgements(for: [Self.id]) }
        try #require(try await eventually { budget.pacerCount(for: Self.id) == 1 })
        budget.remove(Self.id)
        try await withDeadline(seconds: 10) { await waiting.value }
    }
}
