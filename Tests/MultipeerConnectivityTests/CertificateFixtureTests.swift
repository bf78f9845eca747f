import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// The committed test PKI under Certificates/, made by mpc-certgen.
enum Fixtures {
    static let directory = repositoryRootURL.appendingPathComponent("Certificates")
    static var password: String {
        (try? String(contentsOf: directory.appendingPathComponent("password.txt"), encoding: .utf8))?
            .trimmingCharacters(in: .newlines) ?? ""
    }

    static func identity(_ name: String) throws -> SecurityIdentity {
        try SecurityIdentity(pkcs12File: directory.appendingPathComponent("peers/\(name).p12").path, password: password)
    }

    static func certificates(_ path: String) throws -> [Certificate] {
        try Certificate.chain(pemEncoded: String(contentsOf: directory.appendingPathComponent(path), encoding: .utf8))
    }

    static var root: Certificate { get throws { try certificates("ca/ca.pem")[0] } }
}

@Suite("The committed test PKI", .serialized)
struct CertificateFixtureTests {
    private func reason(_ outcome: TrustEvaluation.Outcome) -> TrustEvaluation.Failure.Reason? {
        if case .untrusted(let failure) = outcome { return failure.reason }
        return nil
    }

    @Test func eachFixtureEvaluatesAsItsREADMESays() throws {
        let evaluation = TrustEvaluation(anchors: [try Fixtures.root])
        for name in ["alice", "bob", "carol"] {
            let identity = try Fixtures.identity(name)
            #expect(evaluation.evaluate(identity.certificateChain) == .trusted, "\(name)")
            #expect(identity.certificate.issuerCommonName == "swift-multipeer Test Intermediate CA")
        }
        #expect(try Fixtures.identity("bob").privateKey.algorithm == .ecdsaP256)
        #expect(try Fixtures.identity("carol").privateKey.algorithm == .rsa(bits: 3072))
        #expect(reason(evaluation.evaluate(try Fixtures.identity("expired").certificateChain)) == .expired)
        #expect(reason(evaluation.evaluate(try Fixtures.identity("not-yet-valid").certificateChain)) == .notYetValid)
        #expect(reason(evaluation.evaluate(try Fixtures.identity("mallory").certificateChain)) == .unknownIssuer)
        let solo = try Fixtures.identity("solo")
        #expect(reason(evaluation.evaluate(solo.certificateChain)) == .selfSigned)
        #expect(TrustEvaluation(anchors: [solo.certificate]).evaluate(solo.certificateChain) == .trusted)
        // The PEM key opens with the same password and matches.
        let pem = try SecurityIdentity(
            certificateChainFile: Fixtures.directory.appendingPathComponent("peers/alice.pem").path,
            privateKeyFile: Fixtures.directory.appendingPathComponent("peers/alice.key").path, passphrase: Fixtures.password)
        #expect(pem.certificate == (try Fixtures.identity("alice")).certificate)
    }

    /// The committed certificates pass OpenSSL's own verifier and pyca/cryptography's checks.
    @Test func fixturesPassIndependentTools() async throws {
        let openssl = URL(fileURLWithPath: "/usr/bin/openssl")
        for name in ["alice", "bob", "carol"] {
            let verified = try await BuiltProducts.run(openssl, [
                "verify", "-purpose", "sslclient", "-CAfile", "ca/ca.pem", "-untrusted", "ca/intermediate.pem", "peers/\(name).pem",
            ], in: Fixtures.directory)
            #expect(verified.status == 0, "\(name): \(verified.output)")
            let opened = try await BuiltProducts.run(openssl, ["pkcs12", "-in", "peers/\(name).p12", "-passin", "file:password.txt", "-nokeys"], in: Fixtures.directory)
            #expect(opened.status == 0, "\(name): \(opened.output)")
            let checked = try await BuiltProducts.run(URL(fileURLWithPath: "/usr/bin/env"), [
                "python3", repositoryRootURL.appendingPathComponent("Tests/Scripts/check_certificate.py").path, "peers/\(name).pem", "ca/ca.pem",
            ], in: Fixtures.directory)
            #expect(checked.status == 0, "\(name): \(checked.output)")
        }
        let mallory = try await BuiltProducts.run(openssl, ["verify", "-CAfile", "ca/ca.pem", "peers/mallory.pem"], in: Fixtures.directory)
        #expect(mallory.status != 0)
        let expired = try await BuiltProducts.run(openssl, ["verify", "-CAfile", "ca/ca.pem", "-untrusted", "ca/intermediate.pem", "peers/expired.pem"], in: Fixtures.directory)
        #expect(expired.output.contains("expired"))
    }

    @Test func sessionsWithCLIIdentitiesConnectAndSeeTheExpectedFingerprints() async throws {
        let alice = try Fixtures.identity("alice")
        let bob = try Fixtures.identity("bob")
        let expectedAlice = try Fixtures.certificates("peers/alice.pem")[0].sha256Fingerprint
        let expectedBob = try Fixtures.certificates("peers/bob.pem")[0].sha256Fingerprint
        let aliceSession = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: [SecIdentity(alice)], encryptionPreference: .required, configuration: .loopbackOnly)
        let bobSession = MCSession(peer: MCPeerID(displayName: "bob"), securityIdentity: [SecIdentity(bob)], encryptionPreference: .required, configuration: .loopbackOnly)
        let anchors = [try Fixtures.root]
        let aliceDelegate = RecordingDelegate { _, certificates in
            TrustEvaluation(anchors: anchors).evaluate((certificates as? [SecCertificate])?.map(\.certificate) ?? []).isTrusted
        }
        let bobDelegate = RecordingDelegate { _, certificates in
            TrustEvaluation(anchors: anchors).evaluate((certificates as? [SecCertificate])?.map(\.certificate) ?? []).isTrusted
        }
        aliceSession.delegate = aliceDelegate
        bobSession.delegate = bobDelegate
        let data = try await aliceSession.nearbyConnectionData(forPeer: bobSession.myPeerID)
        bobSession.connectPeer(aliceSession.myPeerID, withNearbyConnectionData: data)
        #expect(try await eventually { aliceSession.connectedPeers.count == 1 && bobSession.connectedPeers.count == 1 })
        let seenByAlice = (aliceDelegate.certificates.first?.1 as? [SecCertificate])?.first?.certificate.sha256Fingerprint
        let seenByBob = (bobDelegate.certificates.first?.1 as? [SecCertificate])?.first?.certificate.sha256Fingerprint
        #expect(seenByAlice == expectedBob)
        #expect(seenByBob == expectedAlice)
        await aliceSession.disconnectAndWait()
        await bobSession.disconnectAndWait()
    }

    @Test func anExpiredFixtureIsRejectedInTheSession() async throws {
        let alice = MCSession(peer: MCPeerID(displayName: "alice"), securityIdentity: [SecIdentity(try Fixtures.identity("alice"))], encryptionPreference: .required, configuration: .loopbackOnly)
        let stale = MCSession(peer: MCPeerID(displayName: "expired"), securityIdentity: [SecIdentity(try Fixtures.identity("expired"))], encryptionPreference: .required, configuration: .loopbackOnly)
        let anchors = [try Fixtures.root]
        let delegate = RecordingDelegate { _, certificates in
            TrustEvaluation(anchors: anchors).evaluate((certificates as? [SecCertificate])?.map(\.certificate) ?? []).isTrusted
        }
        alice.delegate = delegate
        let data = try await alice.nearbyConnectionData(forPeer: stale.myPeerID)
        stale.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
        #expect(try await eventually { delegate.states(of: stale.myPeerID).last == .notConnected })
        #expect(alice.connectedPeers.isEmpty)
        await alice.disconnectAndWait()
        await stale.disconnectAndWait()
    }
}
