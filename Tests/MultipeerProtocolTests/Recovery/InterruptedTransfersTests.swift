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
        guard case .waiting(let claimed, "a")? = table.claimIncoming(Self.key(1), resumed: true), claimed === first else {
            Issue.record("not the first")
            return
        }
        guard case .waiting(let next, "b")? = table.claimIncoming(Self.key(1), resumed: true), next === second else {
            Issue.record("not the second")
            return
        }
        #expect(table.claimIncoming(Self.key(1), resumed: true) == nil && table.isEmpty)
    }

    @Test func aCancelledTransferIsClaimedAsCancelledAndHoldsNoPlace() {
        let table = Table(completedLimit: 4)
        let handle = Handle()
        table.park(.waiting(handle, "cut"), key: Self.key(1), now: Self.start)
        #expect(table.cancelIncoming(Handle(), peer: Self.peer) == nil)
        #expect(table.cancelIncoming(handle, peer: Self.peer).map { $0.1 } == "cut")
        #expect(table.waitingCount(from: Self.peer) == 0 && !table.resumesWaiting(Self.key(1)))
        guard case .cancelled? = table.claimIncoming(Self.key(1), resumed: true) else {
            Issue.record("not cancelled")
            return
        }
    }

    /// An offer the sender did not mark RESUMED is the same content sent anew: it continues a
    /// kept partial, but takes neither a remembered verdict nor a cancel (docs/PROTOCOL.md §7.9).
    @Test func onlyAResumedOfferTakesAVerdictOrACancel() {
        let table = Table(completedLimit: 4)
        table.park(.completed(Handle(), Self.digest), key: Self.key(1), now: Self.start)
        let cancelled = Handle()
        table.park(.waiting(cancelled, "c"), key: Self.key(2), now: Self.start)
        _ = table.cancelIncoming(cancelled, peer: Self.peer)
        table.park(.waiting(Handle(), "w"), key: Self.key(3), now: Self.start)
        #expect(table.claimIncoming(Self.key(1), resumed: false) == nil)
        #expect(table.claimIncoming(Self.key(2), resumed: false) == nil)
        guard case .waiting(_, "w")? = table.claimIncoming(Self.key(3), resumed: false) else {
            Issue.record("a new offer did not continue the kept partial")
            return
        }
        guard case .completed? = table.claimIncoming(Self.key(1), resumed: true), case .cancelled? = table.claimIncoming(Self.key(2), resumed: true) else {
            Issue.record("a resumed offer did not take the verdict or the cancel")
            return
        }
    }

    /// The same content sent twice: the first delivered (its verdict remembered), the second cut
    /// off. A resumed offer continues the second, not the first's verdict.
    @Test func aWaitingTransferGoesBeforeAVerdictRememberedForTheSameContent() {
        let table = Table(completedLimit: 4)
        table.park(.completed(Handle(), Self.digest), key: Self.key(1), now: Self.start)
        table.park(.waiting(Handle(), "second"), key: Self.key(1), now: Self.start + .seconds(1))
        guard case .waiting(_, "second")? = table.claimIncoming(Self.key(1), resumed: true) else {
            Issue.record("the remembered verdict answered the offer that resumes the second transfer")
            return
        }
        guard case .completed? = table.claimIncoming(Self.key(1), resumed: true) else {
            Issue.record("the verdict went too")
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
            guard case .completed? = table.claimIncoming(Self.key(UInt64(id)), resumed: true) else {
                Issue.record("\(id) was dropped")
                return
            }
        }
        #expect(table.claimIncoming(Self.key(9_996), resumed: true) == nil)
    }

    @Test func ourSendsComeBackInOrderOrGoWhenCancelled() {
        let table = Table(completedLimit: 4)
        let (first, second, third) = (Handle(), Handle(), Handle())
        for (index, handle) in [first, second, third].enumerated() {
            table.park(.init(source: "file\(index)", transfer: handle), for: Self.peer, cutOff: true)
        }
        #expect(table.removeOutgoing(second, for: Self.peer) && !table.removeOutgoing(second, for: Self.peer))
        #expect(table.takeOutgoing(for: Self.peer).map(\.source) == ["file0", "file2"])
        #expect(table.takeOutgoing(for: Self.peer).isEmpty && table.isEmpty)
    }
}
