import MultipeerCrypto
import MultipeerWire
import NIOCore
import Testing

@testable import MultipeerProtocol

/// The order a suspended member's redials try its endpoints in (docs/PROTOCOL.md §7.9): news
/// first, then the old address, then discovered ones; where a handshake just failed, last, for
/// one redial only.
@Suite("Recoverable members: redial endpoints")
struct RecoverableMemberRedialTests {
    static func endpoint(_ host: UInt32) -> WireEndpoint { try! WireEndpoint(address: .ipv4(0x0A00_0000 + host), port: 7000) }

    let old = endpoint(1)
    let introduced = endpoint(2)
    let discovered = [endpoint(3), endpoint(4)]

    func member() throws -> RecoverableMember {
        let peer = try WirePeerID(identifier: Bytes16(high: 7, low: 7), displayName: "bob")
        let keys = ResumptionKeys(id: [UInt8](repeating: 1, count: 16), key: SecureBytes(randomCount: 32))
        let member = RecoverableMember(peer: peer, keys: keys, certificateFingerprint: [1, 2, 3], listenEndpoint: old)
        member.introduced(at: introduced, now: .uptimeNanoseconds(0))
        member.discoveredEndpoints = discovered
        return member
    }

    @Test func newsComesFirstThenTheOldAddressThenDiscoveredOnesInTurn() throws {
        let member = try member()
        #expect(member.redialEndpoints == [introduced, old] + discovered)
        member.redialStarted()
        #expect(member.redialEndpoints == [introduced, old, discovered[1], discovered[0]])
    }

    /// A handshake that timed out under load may have been the member's own: demoting its
    /// endpoint for the rest of the suspension would put a dead old address ahead of it on every
    /// redial, and re-introducing it would not help.
    @Test func anEndpointWhoseHandshakeFailedGoesLastForOneRedialOnly() throws {
        let member = try member()
        member.handshakeFailed(at: introduced)
        #expect(member.redialEndpoints == [old] + discovered + [introduced])
        member.redialStarted()
        #expect(member.redialEndpoints == [introduced, old, discovered[1], discovered[0]])
    }

    /// Whoever has the old address now may stall too.
    @Test func theOldAddressAndDiscoveredOnesAreDemotedAlike() throws {
        let member = try member()
        member.handshakeFailed(at: old)
        #expect(member.redialEndpoints == [introduced] + discovered + [old])
        member.redialStarted()
        member.handshakeFailed(at: discovered[1])
        #expect(member.redialEndpoints == [introduced, old, discovered[0], discovered[1]])
    }

    /// A failure where the member no longer listens adds nothing to try.
    @Test func aFailedEndpointNoLongerNamedIsNotTried() throws {
        let member = try member()
        member.handshakeFailed(at: Self.endpoint(9))
        #expect(member.redialEndpoints == [introduced, old] + discovered)
    }
}
