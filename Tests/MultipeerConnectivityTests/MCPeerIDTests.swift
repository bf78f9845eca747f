import Foundation
import MultipeerConnectivity
import Testing

@Suite("MCPeerID")
struct MCPeerIDTests {
    @Test func everyPeerIsUniqueEvenWithTheSameName() {
        let first = MCPeerID(displayName: "alice")
        let second = MCPeerID(displayName: "alice")
        #expect(first.displayName == "alice")
        #expect(first != second)
        #expect(first == first)
        #expect(Set([first, second, first]).count == 2)
        #expect(first.copy() as? MCPeerID == first)
    }

    @Test func displayNameLimits() throws {
        #expect(throws: MCError.self) { try MCPeerID(validatingDisplayName: "") }
        #expect(throws: MCError.self) { try MCPeerID(validatingDisplayName: String(repeating: "a", count: 64)) }
        #expect(throws: MCError.self) { try MCPeerID(validatingDisplayName: String(repeating: "ü", count: 32)) }
        #expect(try MCPeerID(validatingDisplayName: String(repeating: "a", count: 63)).displayName.utf8.count == 63)
        do {
            _ = try MCPeerID(validatingDisplayName: "")
        } catch {
            #expect(error.code == .invalidParameter)
        }
    }

    @Test func keyedArchiveRestoresTheSamePeer() throws {
        let peer = MCPeerID(displayName: "Kitchen iPad ✨")
        let archive = try NSKeyedArchiver.archivedData(withRootObject: peer, requiringSecureCoding: true)
        let restored = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archive))
        #expect(restored == peer)
        #expect(restored.displayName == peer.displayName)
        #expect(restored.hash == peer.hash)
    }

    @Test func codableRestoresTheSamePeer() throws {
        let peer = MCPeerID(displayName: "bob")
        let json = try JSONEncoder().encode(peer)
        let restored = try JSONDecoder().decode(MCPeerID.self, from: json)
        #expect(restored == peer)
        #expect(restored.displayName == "bob")
        let bad = Data(#"{"identifier":"00","displayName":"bob"}"#.utf8)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(MCPeerID.self, from: bad) }
        let badName = Data(#"{"identifier":"000102030405060708090a0b0c0d0e0f","displayName":""}"#.utf8)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(MCPeerID.self, from: badName) }
    }

    @Test func wireRepresentationRoundTripsAndRejectsGarbage() throws {
        let peer = MCPeerID(displayName: "carol")
        let restored = try MCPeerID(wireRepresentation: peer.wireRepresentation)
        #expect(restored == peer)
        #expect(restored.displayName == "carol")
        #expect(peer.wireRepresentation.count == 1 + 16 + 1 + 5)
        for garbage in [Data(), Data([2]), peer.wireRepresentation + Data([0]), Data(repeating: 1, count: 10_000)] {
            #expect(throws: MCError.self) { try MCPeerID(wireRepresentation: garbage) }
        }
    }
}

@Suite("Apple API value types")
struct APIValueTypeTests {
    @Test func rawValuesMatchApple() {
        #expect(MCSessionSendDataMode.reliable.rawValue == 0)
        #expect(MCSessionSendDataMode.unreliable.rawValue == 1)
        #expect(MCSessionState.notConnected.rawValue == 0)
        #expect(MCSessionState.connecting.rawValue == 1)
        #expect(MCSessionState.connected.rawValue == 2)
        #expect(MCEncryptionPreference.optional.rawValue == 0)
        #expect(MCEncryptionPreference.required.rawValue == 1)
        #expect(MCEncryptionPreference.none.rawValue == 2)
        #expect(kMCSessionMinimumNumberOfPeers == 2)
        #expect(kMCSessionMaximumNumberOfPeers == 8)
    }

    @Test func errorsCarryAppleDomainAndCodes() {
        let expected: [(MCError.Code, Int)] = [
            (.unknown, 0), (.notConnected, 1), (.invalidParameter, 2), (.unsupported, 3),
            (.timedOut, 4), (.cancelled, 5), (.unavailable, 6),
        ]
        for (code, raw) in expected {
            let error = MCError(code)
            #expect(error.code == code)
            #expect(error.errorCode == raw)
            #expect(MCError.errorDomain == "MCErrorDomain")
            let bridged = error as NSError
            #expect(bridged.domain == MCErrorDomain)
            #expect(bridged.code == raw)
        }
    }

    @Test func errorsMatchAppleStyleCatchPatterns() {
        func fail() throws { throw MCError(.notConnected, reason: "peer left") }
        var caught = false
        do {
            try fail()
        } catch MCError.notConnected {
            caught = true
        } catch {
            Issue.record("wrong pattern: \(error)")
        }
        #expect(caught)
        do {
            try fail()
        } catch let error as MCError {
            #expect(error.code == .notConnected)
            #expect(error.localizedDescription.contains("peer left"))
        } catch {
            Issue.record("not an MCError")
        }
    }

    /// Code written for Apple's framework makes errors with `MCError(_:userInfo:)`.
    @Test func applesUserInfoInitializer() {
        let error = MCError(.timedOut, userInfo: [NSLocalizedDescriptionKey: "the peer did not answer", "other": 42])
        #expect(error.code == .timedOut)
        #expect(error.reason == "the peer did not answer")
        #expect((error as NSError).localizedDescription == "the peer did not answer")
        #expect(MCError(.cancelled, userInfo: [:]).reason == "cancelled")
    }
}
