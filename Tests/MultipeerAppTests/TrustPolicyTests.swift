import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import Testing

@testable import MultipeerConnectivity
@testable import multipeer

/// `multipeer --trust-ca`: a peer is accepted when its chain verifies to the CA and the
/// certificate's common name is the name it shows, and only then.
@Suite("multipeer: --trust-ca")
struct TrustPolicyTests {
    static let pki = try! TestPKI()

    private func decide(_ identity: SecurityIdentity, as name: String) async -> Bool {
        let policy = TrustPolicy(anchors: [Self.pki.root], trustAny: false, console: Console(drawsBars: false, canAsk: false))
        let request = MCTrustRequest(
            peer: MCPeerID(displayName: name), certificates: identity.certificateChain.map(SecCertificate.init), pairingCode: "123 456",
            isEncrypted: true)
        return await policy.decide(request)
    }

    @Test func aPeerOfTheCAIsAcceptedUnderItsOwnNameOnly() async throws {
        let bob = try Self.pki.peer("bob")
        #expect(await decide(bob, as: "bob"))
        #expect(!(await decide(bob, as: "alice")))
        #expect(!(await decide(try TestPKI(name: "Rogue").peer("bob"), as: "bob")))
    }

    /// Both chain to the CA and were accepted as bob.
    @Test func aCALeafOrALeafWithTwoCommonNamesIsRejected() async throws {
        #expect(!(await decide(try Self.pki.peer("bob") { $0.marksPeerAsCertificateAuthority = true }, as: "bob")))
        let twoNames = try Self.pki.peer("bob") { $0.additionalCommonNames = ["mallory"] }
        #expect(!(await decide(twoNames, as: "bob")))
        #expect(!(await decide(twoNames, as: "mallory")))
    }
}
