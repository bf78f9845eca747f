import MultipeerCrypto
import MultipeerTestSupport
import MultipeerWire
@testable import MultipeerProtocol

/// Every pair of encryption preferences and identities, with the outcome the spec's table gives
/// (docs/PROTOCOL.md §4): run by the machine pair and through the NIO pipeline.
package enum HandshakeMatrix {
    package struct Case: Sendable, CustomStringConvertible {
        package let dialer: WireEncryptionPreference
        package let dialerHasIdentity: Bool
        package let listener: WireEncryptionPreference
        package let listenerHasIdentity: Bool

        package var description: String {
            "\(dialer)\(dialerHasIdentity ? "+id" : "") -> \(listener)\(listenerHasIdentity ? "+id" : "")"
        }

        /// The spec's table, written out independently of Negotiation.
        package var expected: String {
            let pair: Set = [dialer, listener]
            if pair == [.none, .required] { return "refused" }
            if pair.contains(.required) || pair == [.optional] || dialerHasIdentity || listenerHasIdentity { return "tls" }
            return "plaintext"
        }
    }

    package static let cases: [Case] = WireEncryptionPreference.allCases.flatMap { dialer in
        WireEncryptionPreference.allCases.flatMap { listener in
            [false, true].flatMap { dialerID in
                [false, true].map { listenerID in
                    Case(dialer: dialer, dialerHasIdentity: dialerID, listener: listener, listenerHasIdentity: listenerID)
                }
            }
        }
    }

    package static let pki = try! TestPKI()
    package static let alice = try! pki.peer("alice")
    package static let bob = try! pki.peer("bob", algorithm: .ecdsaP256)

}

package extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard !subsequence.isEmpty, subsequence.count <= count else { return false }
        return (0...(count - subsequence.count)).contains { start in self[start..<start + subsequence.count].elementsEqual(subsequence) }
    }
}
