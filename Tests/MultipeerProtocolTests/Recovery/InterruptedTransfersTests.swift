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

    /// A send of content `content` (its transfer ID) numbered `id` by the sender.
    static func send(_ content: UInt64, id: UInt64) -> Table.Send { Table.Send(key(content), id: id) }

    /// The same file sent twice at once, both cut off: each offer takes its own send's transfer,
    /// whichever order they come in.
    @Test func offersClaimTheWaitingTransferOfTheirOwnSend() {
        let table = Table(completedLimit: 4)
        let (first, second) = (Handle(), Handle())
        table.park(.waiting(first, "a"), send: Self.send(1, id: 11), now: Self.start)
        table.park(.waiting(second, "b"), send: Self.send(1, id: 12), now: Self.start)
        #expect(table.waitingCount(from: Self.peer) == 2)
        #expect(table.resumesWaiting(Self.send(1, id: 11)) && !table.resumesWaiting(Self.send(1, id: 13)) && !table.resumesWaiting(Self.send(2, id: 11)))
        guard case .waiting(let claimed, "b")? = table.claimIncoming(Self.send(1, id: 12), resumed: true), claimed === second else {
            Issue.record("not the second send's")
            return
        }
        guard case .waiting(let next, "a")? = table.claimIncoming(Self.send(1, id: 11), resumed: false), next === first else {
            Issue.record("not the first send's")
            return
        }
        #expect(table.claimIncoming(Self.send(1, id: 11), resumed: true) == nil && table.isEmpty)
    }

    @Test func aCancelledTransferIsClaimedAsCancelledAndHoldsNoPlace() {
        let table = Table(completedLimit: 4)
        let handle = Handle()
        table.park(.waiting(handle, "cut"), send: Self.send(1, id: 11), now: Self.start)
        #expect(table.cancelIncoming(Handle(), peer: Self.peer) == nil)
        #expect(table.cancelIncoming(handle, peer: Self.peer).map { $0.1 } == "cut")
        #expect(table.waitingCount(from: Self.peer) == 0 && !table.resumesWaiting(Self.send(1, id: 11)))
        #expect(table.claimIncoming(Self.send(1, id: 12), resumed: true) == nil, "another send's offer took the cancel")
        guard case .cancelled? = table.claimIncoming(Self.send(1, id: 11), resumed: false) else {
            Issue.record("not cancelled")
            return
        }
    }

    /// A verdict answers only a RESUMED offer of its send (docs/PROTOCOL.md §7.9); a waiting
    /// transfer or a cancel is taken by any offer of its send (without RESUMED when the
    /// RESOURCE_ACCEPT went with the link).
    @Test func onlyAResumedOfferTakesAVerdict() {
        let table = Table(completedLimit: 4)
        table.park(.completed(Handle(), Self.digest), send: Self.send(1, id: 11), now: Self.start)
        table.park(.waiting(Handle(), "w"), send: Self.send(3, id: 13), now: Self.start)
        #expect(table.claimIncoming(Self.send(1, id: 11), resumed: false) == nil)
        #expect(!table.answersFromMemory(Self.send(1, id: 11), resumed: false) && table.answersFromMemory(Self.send(1, id: 11), resumed: true))
        guard case .waiting(_, "w")? = table.claimIncoming(Self.send(3, id: 13), resumed: false) else {
            Issue.record("an offer whose ACCEPT went with the link did not take its waiting transfer")
            return
        }
        guard case .completed? = table.claimIncoming(Self.send(1, id: 11), resumed: true) else {
            Issue.record("a resumed offer did not take its verdict")
            return
        }
    }

    /// Review item M4: the first send of a file was delivered (its verdict remembered); the
    /// receiver's application cancelled a second send of it on a live link, and the cancel went
    /// with the link. The second send's RESUMED offer is a new transfer, not one the first send's
    /// verdict answers; before send IDs, the receiver answered it "received".
    @Test func aVerdictNeverAnswersAnotherSendOfTheSameContent() {
        let table = Table(completedLimit: 4)
        table.park(.completed(Handle(), Self.digest), send: Self.send(1, id: 11), now: Self.start)
        #expect(!table.answersFromMemory(Self.send(1, id: 12), resumed: true))
        #expect(table.claimIncoming(Self.send(1, id: 12), resumed: true) == nil, "the first send's verdict answered the second")
        guard case .completed? = table.claimIncoming(Self.send(1, id: 11), resumed: true) else {
            Issue.record("the first send's own offer lost its verdict")
            return
        }
    }

    /// The same content sent twice: the first delivered (its verdict remembered), the second cut
    /// off. Each send's offer gets its own: the second its waiting transfer, the first its verdict.
    @Test func aWaitingTransferAndAVerdictOfTheSameContentGoToTheirOwnSends() {
        let table = Table(completedLimit: 4)
        table.park(.completed(Handle(), Self.digest), send: Self.send(1, id: 11), now: Self.start)
        table.park(.waiting(Handle(), "second"), send: Self.send(1, id: 12), now: Self.start + .seconds(1))
        guard case .completed? = table.claimIncoming(Self.send(1, id: 11), resumed: true) else {
            Issue.record("the first send's offer did not get its verdict")
            return
        }
        guard case .waiting(_, "second")? = table.claimIncoming(Self.send(1, id: 12), resumed: true) else {
            Issue.record("the second send's offer did not continue its transfer")
            return
        }
    }

    /// After a resumption, what was parked before it and not offered again goes; what a later
    /// loss parked stays for the next resumption.
    @Test func expiryTakesOnlyWhatWasParkedBeforeTheResumption() {
        let table = Table(completedLimit: 4)
        table.park(.waiting(Handle(), "old"), send: Self.send(1, id: 11), now: Self.start)
        table.park(.waiting(Handle(), "new"), send: Self.send(2, id: 12), now: Self.start + .seconds(5))
        let taken = table.takeIncoming(for: Self.peer, parkedBy: Self.start + .seconds(1))
        #expect(taken.count == 1 && table.resumesWaiting(Self.send(2, id: 12)) && !table.resumesWaiting(Self.send(1, id: 11)))
        #expect(table.takeIncoming(for: Self.peer).count == 1 && table.isEmpty)
    }

    /// A peer that cuts its links again and again while files are being checked cannot grow the
    /// remembered verdicts: the oldest go past the per-peer cap; waiting transfers are not touched.
    @Test func aFloodOfRememberedVerdictsIsCappedPerPeer() {
        let table = Table(completedLimit: 4)
        table.park(.waiting(Handle(), "kept"), send: Self.send(0, id: 0), now: Self.start)
        for id in 1...10_000 {
            table.park(.completed(Handle(), Self.digest), send: Self.send(1, id: UInt64(id)), now: Self.start)
        }
        #expect(table.incomingCount(from: Self.peer) == 5)
        #expect(table.waitingCount(from: Self.peer) == 1)
        // The newest four are the ones left.
        for id in 9_997...10_000 {
            guard case .completed? = table.claimIncoming(Self.send(1, id: UInt64(id)), resumed: true) else {
                Issue.record("\(id) was dropped")
                return
            }
        }
        #expect(table.claimIncoming(Self.send(1, id: 9_996), resumed: true) == nil)
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
