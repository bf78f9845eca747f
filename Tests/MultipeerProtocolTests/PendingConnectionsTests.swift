import NIOCore
import ProtocolTestSupport
import Testing

@testable import MultipeerProtocol

/// Which pending connection a listener sheds (issue 28, holes 1 and 4): never the newcomer, the
/// least advanced and longest silent of the others, of the newcomer's own source when that source
/// is over its limit.
@Suite struct PendingConnectionsTests {
    /// A listener's view: each connection's stage and last activity, set by the test.
    final class Listener {
        var table: PendingConnections<Int>
        var progress: [Int: PendingProgress] = [:]
        var next = 0
        var shed: [Int] = []

        init(limit: Int, perSource: Int) { table = PendingConnections(limit: limit, perSourceLimit: perSource) }

        @discardableResult
        func accept(from source: PendingSource, stage: Int = 0, at second: Int64) -> Int {
            next += 1
            let id = next
            if let gone = table.accepted(id, from: source, progress: { self.progress[$0]! }) {
                shed.append(gone)
                progress[gone] = nil
            }
            progress[id] = PendingProgress(stage: stage, lastActivity: .uptimeNanoseconds(0) + .seconds(second))
            return id
        }
    }

    static let hostA = PendingSource(try! SocketAddress(ipAddress: "192.0.2.1", port: 1000))
    static let hostB = PendingSource(try! SocketAddress(ipAddress: "192.0.2.2", port: 1000))

    @Test func theNewcomerIsNeverShedEvenWhenEveryOtherIsFurtherAlong() {
        let listener = Listener(limit: 4, perSource: 4)
        let advanced = (1...4).map { listener.accept(from: Self.hostA, stage: 3, at: $0) }
        let newcomer = listener.accept(from: Self.hostA, at: 10)
        #expect(listener.shed == [advanced[0]])
        #expect(listener.table.contains(newcomer))
        #expect(listener.table.count == 4)
    }

    @Test func theLeastAdvancedGoesFirstThenTheLongestSilent() {
        let listener = Listener(limit: 3, perSource: 3)
        let nearlyIn = listener.accept(from: Self.hostA, stage: 2, at: 1)
        let idleOld = listener.accept(from: Self.hostA, stage: 0, at: 2)
        let idleRecent = listener.accept(from: Self.hostA, stage: 0, at: 3)
        listener.accept(from: Self.hostA, at: 4)
        listener.accept(from: Self.hostA, at: 5)
        #expect(listener.shed == [idleOld, idleRecent])
        #expect(listener.table.contains(nearlyIn))
    }

    @Test func aSourceOverItsLimitShedsItsOwnConnectionsOnly() {
        let listener = Listener(limit: 16, perSource: 4)
        // B's connection is older and idle; A floods past its own limit.
        let real = listener.accept(from: Self.hostB, at: 0)
        for second in 1...40 { listener.accept(from: Self.hostA, at: Int64(second)) }
        #expect(listener.table.contains(real))
        #expect(listener.table.count(from: Self.hostA) == 4)
        #expect(listener.table.count == 5)
        #expect(listener.shed.count == 36)
    }

    @Test func aFloodFromManySourcesStaysWithinTheLimit() {
        let listener = Listener(limit: 16, perSource: 4)
        for index in 0..<2_000 {
            let source = PendingSource(try! SocketAddress(ipAddress: "198.51.100.\(index % 250)", port: 1))
            listener.accept(from: source, at: Int64(index))
        }
        #expect(listener.table.count == 16)
        #expect(listener.shed.count == 2_000 - 16)
    }

    @Test func admittedAndClosedConnectionsNoLongerCount() {
        let listener = Listener(limit: 2, perSource: 2)
        let first = listener.accept(from: Self.hostA, at: 1)
        let second = listener.accept(from: Self.hostA, at: 2)
        listener.table.remove(first)
        listener.table.remove(first)  // twice is harmless
        listener.accept(from: Self.hostA, at: 3)
        #expect(listener.shed.isEmpty)
        #expect(listener.table.count(from: Self.hostA) == 2)
        var table = listener.table
        #expect(table.shedOne { listener.progress[$0]! } == second)
        #expect(table.count == 1)
    }

    @Test func eachIPv6AddressIsASourceOfItsOwnAndAMappedAddressIsItsIPv4Address() throws {
        let one = PendingSource(try SocketAddress(ipAddress: "2001:db8:1:2::1", port: 1))
        let samePrefix = PendingSource(try SocketAddress(ipAddress: "2001:db8:1:2::2", port: 2))
        let sameAddressOtherPort = PendingSource(try SocketAddress(ipAddress: "2001:db8:1:2::1", port: 9))
        #expect(one != samePrefix)
        #expect(one == sameAddressOtherPort)
        let mapped = PendingSource(try SocketAddress(ipAddress: "::ffff:192.0.2.1", port: 5))
        #expect(mapped == Self.hostA)
        #expect(Self.hostA != Self.hostB)
    }

    /// Link-local peers share fe80::/64 on every link; the same address on two links is two hosts.
    @Test func linkLocalPeersAreSourcesOfTheirOwnPerLink() throws {
        func linkLocal(_ host: String, scope: UInt32) throws -> PendingSource {
            guard case .v6(let v6) = try SocketAddress(ipAddress: host, port: 1) else { throw SocketAddressError.unsupported }
            var raw = v6.address
            raw.sin6_scope_id = scope
            return PendingSource(SocketAddress(raw, host: host))
        }
        #expect(try linkLocal("fe80::1", scope: 2) != linkLocal("fe80::2", scope: 2))
        #expect(try linkLocal("fe80::1", scope: 2) != linkLocal("fe80::1", scope: 3))
        #expect(try linkLocal("fe80::1", scope: 2) == linkLocal("fe80::1", scope: 2))
    }
}
