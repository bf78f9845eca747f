import MultipeerWire
import Testing

@testable import MultipeerProtocol
import ProtocolTestSupport

/// The inviter's core on its own (docs/PROTOCOL.md §7.2): what each piece of news from the shell leads to.
@Suite("Inviter")
struct InviterTests {
    static func inviter(addresses: Int = 2) -> Inviter {
        Inviter(invitee: bobPeer, localPeer: alicePeer.identifier, addressCount: addresses)
    }

    /// The shell reports the end of an open connection, whether or not the news that it opened
    /// came first: the invitation ends either way, so its outcome is never left waiting.
    @Test(arguments: ["transport closed", "connection ended", "answered"])
    func newsFromAnOpenConnectionEndsTheInvitationEvenBeforeItsOpening(news: String) {
        var inviter = Self.inviter()
        #expect(inviter.start() == [.dial(addressIndex: 0)])
        let actions: [Inviter.Action] = switch news {
        case "transport closed": inviter.transportClosed()
        case "connection ended": inviter.connectionEnded(ConnectionError(.handshakeTimedOut))
        default: inviter.answered(try! InvitationAnswer(.declined))
        }
        #expect(actions.count == 1)
        #expect(inviter.outcome != nil)
        // A late report that the dial failed tries no other address.
        #expect(inviter.connectionOpened().isEmpty && inviter.dialFailed("late").isEmpty)
    }

    @Test func failedDialsTryTheNextAddressThenEnd() {
        var inviter = Self.inviter(addresses: 2)
        _ = inviter.start()
        #expect(inviter.dialFailed("refused") == [.dial(addressIndex: 1)])
        #expect(inviter.dialFailed("unreachable") == [.finished(.unreachable("unreachable"))])
        #expect(inviter.dialFailed("again").isEmpty)
    }

    @Test func theEndOfAnAnsweredConnectionChangesNothing() {
        var inviter = Self.inviter()
        _ = inviter.start()
        _ = inviter.connectionOpened()
        #expect(inviter.answered(try! InvitationAnswer(.sessionFull)) == [.finished(.sessionFull)])
        #expect(inviter.connectionEnded(ConnectionError(.invitationEnded)).isEmpty)
        #expect(inviter.transportClosed().isEmpty)
    }
}
