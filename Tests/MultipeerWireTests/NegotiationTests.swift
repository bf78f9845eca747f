import MultipeerWire
import NIOCore
import Testing

@Suite("Preamble and encryption negotiation (docs/PROTOCOL.md §3, §4)")
struct NegotiationTests {
    typealias Pref = WireEncryptionPreference

    /// The whole table, written out from the spec's rules rather than computed by them.
    static func expected(_ dialer: Pref, _ dialerID: Bool, _ listener: Pref, _ listenerID: Bool) -> String {
        let pair = Set([dialer, listener])
        if pair == [.none, .required] { return "refused" }
        if pair.contains(.required) || pair == [.optional] { return "tls" }
        return dialerID || listenerID ? "tls" : "plaintext"
    }

    @Test func everyPreferenceAndIdentityCombination() throws {
        var seen = 0
        for dialer in Pref.allCases {
            for listener in Pref.allCases {
                for dialerID in [false, true] {
                    for listenerID in [false, true] {
                        let outcome = Negotiation.outcome(
                            dialer: try Preamble(encryptionPreference: dialer, hasIdentity: dialerID),
                            listener: try Preamble(encryptionPreference: listener, hasIdentity: listenerID))
                        let name: String = switch outcome {
                        case .tls(version: 1): "tls"
                        case .plaintext(version: 1): "plaintext"
                        case .refused(.encryptionIncompatible): "refused"
                        default: "unexpected \(outcome)"
                        }
                        #expect(name == Self.expected(dialer, dialerID, listener, listenerID), "\(dialer)/\(dialerID) x \(listener)/\(listenerID)")
                        seen += 1
                    }
                }
            }
        }
        #expect(seen == 36)
    }

    @Test func requiredAndIdentitiesNeverYieldPlaintext() throws {
        for mine in Pref.allCases {
            for theirs in Pref.allCases {
                for theirID in [false, true] {
                    let other = try Preamble(encryptionPreference: theirs, hasIdentity: theirID)
                    for (me, myID) in [(Pref.required, false), (mine, true)] {
                        let preamble = try Preamble(encryptionPreference: me, hasIdentity: myID)
                        for outcome in [Negotiation.outcome(dialer: preamble, listener: other), Negotiation.outcome(dialer: other, listener: preamble)] {
                            if case .plaintext = outcome { Issue.record("\(me)/\(myID) with \(theirs)/\(theirID) gave plaintext") }
                        }
                    }
                }
            }
        }
    }

    @Test func versionsNegotiateToTheHighestCommonOne() throws {
        let old = try Preamble(minVersion: 1, maxVersion: 1, encryptionPreference: .optional, hasIdentity: false)
        let new = try Preamble(minVersion: 1, maxVersion: 3, encryptionPreference: .optional, hasIdentity: false)
        let newer = try Preamble(minVersion: 2, maxVersion: 4, encryptionPreference: .optional, hasIdentity: false)
        #expect(Negotiation.outcome(dialer: old, listener: new) == .tls(version: 1))
        #expect(Negotiation.outcome(dialer: newer, listener: new) == .tls(version: 3))
        #expect(Negotiation.outcome(dialer: old, listener: newer) == .refused(.versionMismatch))
        #expect(throws: WireError.self) { try Preamble(minVersion: 0, maxVersion: 1, encryptionPreference: .none, hasIdentity: false) }
        #expect(throws: WireError.self) { try Preamble(minVersion: 3, maxVersion: 2, encryptionPreference: .none, hasIdentity: false) }
    }

    @Test func malformedPreamblesAreRefused() {
        func code(_ bytes: [UInt8]) -> WireError.Code? {
            do { _ = try Preamble.decode(buffer(bytes)); return nil } catch { return error.code }
        }
        #expect(code(Array("MPCP".utf8) + [1, 1, 0, 0]) == nil)
        #expect(code(Array("HTTP".utf8) + [1, 1, 0, 0]) == .badMagic)
        #expect(code(Array("MPCP".utf8) + [1, 1, 3, 0]) == .invalidValue)
        #expect(code(Array("MPCP".utf8) + [1, 1, 0, 2]) == .nonZeroReserved)
        #expect(code(Array("MPCP".utf8) + [0, 1, 0, 0]) == .invalidValue)
        #expect(code(Array("MPCP".utf8) + [2, 1, 0, 0]) == .invalidValue)
        #expect(code(Array("MPCP".utf8) + [1, 1, 0]) == .invalidLength)
        #expect(code(Array("MPCP".utf8) + [1, 1, 0, 0, 0]) == .invalidLength)
        #expect(code([]) == .invalidLength)
    }

    @Test func helloEchoCarriesBothPreamblesInOrder() throws {
        let dialer = try Preamble(encryptionPreference: .optional, hasIdentity: false)
        let listener = try Preamble(encryptionPreference: .required, hasIdentity: true)
        let echo = Hello.echo(dialer: dialer, listener: listener)
        var bytes = ByteBuffer()
        dialer.encode(into: &bytes)
        listener.encode(into: &bytes)
        #expect(echo.bytes == Array(bytes.readableBytesView))
        #expect(echo != Hello.echo(dialer: listener, listener: dialer))
    }
}
