import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol

/// The table of transfers a lost link cut off (docs/PROTOCOL.md §7.9), without files or sockets.
@Suite("Interrupted transfers")
struct InterruptedTransfersTests {
    final class Handle {}
    typealias Table = InterruptedTransfers<String, Handle, String>

    static let peer = Bytes16(high: 1, low: 2)
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
    static let digest = try! SHA256Digest(bytes: [UInt8](repeating: 7, count: 32))

    static func key(_ id: UInt64, peer: Bytes16 = peer) -> ResumeStore.Key {
        ResumeStore.Key(peer: peer, fingerprint: nil, transferID: Bytes16(high: 0, low: id), size: 100)
    }

    @Test func offersClaimWaitingTransfersByKeyInTheOrderTheyWereCutOff() {
        let table = Table(completedLimit: 4)
        let (first, second) = (Handle(), Handle())
        // The same file sent twice at once: both wait under one key.
        table.park(.waiting(first, "a"), key: Self.key(1), now: Self.start)
        table.park(.waiting(second, "b"), key: Self.key(1), now: Self.start)
        #expect(table.waitingCount(from: Self.peer) == 2 && table.resumesWaiting(Self.key(1)) && !table.resumesWaiting(Self.key(2)))
        guard case .waiting(let claimed, "a")? = table.claimIncoming(Self.key(1)), claimed === first else {
            Issue.record("not the first")
            return
        }
        guard case .waiting(let next, "b")? = table.claimIncoming(Self.key(1)), next === second else {
            Issue.record("not the second")
            return
        }
        #expect(table.claimIncoming(Self.key(1)) == nil && table.isEmpty)
    }

    @Test func aCancelledTransferIsClaimedAsCancelledAndHoldsNoPlace() {
        let table = Table(completedLimit: 4)
        let handle = Handle()
        table.park(.waiting(handle, "cut"), key: Self.key(1), now: Self.start)
        #expect(table.cancelIncoming(Handle(), peer: Self.peer) == nil)
        #expect(table.cancelIncoming(handle, peer: Self.peer).map { $0.1 } == "cut")
        #expect(table.waitingCount(from: Self.peer) == 0 && !table.resumesWaiting(Self.key(1)))
        guard case .cancelled? = table.claimIncoming(Self.key(1)) else {
            Issue.record("not cancelled")
            return
        }
    }

    /// After a resumption, what was parked before it and not offered again goes; what a later
    /// loss parked stays for the next resumption.
    @Test func expiryTakesOnlyWhatWasParkedBeforeTheResumption() {
        let table = Table(completedLimit: 4)
        table.park(.waiting(Handle(), "old"), key: Self.key(1), now: Self.start)
        table.park(.waiting(Handle(), "new"), key: Self.key(2), now: Self.start + .seconds(5))
        let taken = table.takeIncoming(for: Self.peer, parkedBy: Self.start + .seconds(1))
        #expect(taken.count == 1 && table.resumesWaiting(Self.key(2)) && !table.resumesWaiting(Self.key(1)))
        #expect(table.takeIncoming(for: Self.peer).count == 1 && table.isEmpty)
    }

    /// A peer that cuts its links again and again while files are being checked cannot grow the
    /// remembered verdicts: the oldest go past the per-peer cap; waiting transfers are not touched.
    @Test func aFloodOfRememberedVerdictsIsCappedPerPeer() {
        let table = Table(completedLimit: 4)
        table.park(.waiting(Handle(), "kept"), key: Self.key(0), now: Self.start)
        for id in 1...10_000 {
            table.park(.completed(Handle(), Self.digest), key: Self.key(UInt64(id)), now: Self.start)
        }
        #expect(table.incomingCount(from: Self.peer) == 5)
        #expect(table.waitingCount(from: Self.peer) == 1)
        // The newest four are the ones left.
        for id in 9_997...10_000 {
            guard case .completed? = table.claimIncoming(Self.key(UInt64(id))) else {
                Issue.record("\(id) was dropped")
                return
            }
        }
        #expect(table.claimIncoming(Self.key(9_996)) == nil)
    }

    @Test func ourSendsComeBackInOrderOrGoWhenCancelled() {
        let table = Table(completedLimit: 4)
        let (first, second, third) = (Handle(), Handle(), Handle())
        for (index, handle) in [first, second, third].enumerated() {
            table.park(.init(source: "file\(index)", transfer: handle), for: Self.peer)
        }
        #expect(table.removeOutgoing(second, for: Self.peer) && !table.removeOutgoing(second, for: Self.peer))
        #expect(table.takeOutgoing(for: Self.peer).map(\.source) == ["file0", "file2"])
        #expect(table.takeOutgoing(for: Self.peer).isEmpty && table.isEmpty)
    }
}
