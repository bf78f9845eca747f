import MultipeerConnectivity
import MultipeerTestSupport
import Testing

/// Apple's Security calls as apps make them: importing a PKCS#12 identity, and deciding on a
/// peer's certificate chain with SecTrust against the app's own CA. The committed test PKI
/// (Certificates/README.md) supplies the files.
@Suite("Apple's Security calls", .serialized)
struct SecurityPortingTests {
    static let directory = repositoryRootURL.appendingPathComponent("Certificates")

    static var password: String {
        get throws { try String(contentsOf: directory.appendingPathComponent("password.txt"), encoding: .utf8).trimmingCharacters(in: .newlines) }
    }

    /// A certificate as apps load one from their bundle: DER bytes (here out of the PEM file).
    static func certificate(_ path: String) throws -> SecCertificate {
        let pem = try String(contentsOf: directory.appendingPathComponent(path), encoding: .utf8)
        let body = pem.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1].components(separatedBy: "-----END CERTIFICATE-----")[0]
        let der = try #require(Data(base64Encoded: body.filter { !$0.isWhitespace }))
        return try #require(SecCertificateCreateWithData(nil, der as CFData))
    }

    /// Apple's import, as apps write it.
    static func importIdentity(_ name: String, password: String? = nil) throws -> (status: OSStatus, identity: SecIdentity?, chain: [SecCertificate]) {
        let data = try Data(contentsOf: directory.appendingPathComponent("peers/\(name).p12"))
        let options = [kSecImportExportPassphrase as String: try password ?? Self.password]
        var rawItems: CFArray?
        let status = SecPKCS12Import(data as CFData, options as CFDictionary, &rawItems)
        guard status == errSecSuccess, let items = rawItems as? [[String: Any]], let first = items.first else { return (status, nil, []) }
        let identity = first[kSecImportItemIdentity as String] as? SecIdentity
        let chain = first[kSecImportItemCertChain as String] as? [SecCertificate] ?? []
        return (status, identity, chain)
    }

    /// Apple's evaluation, as apps write it: the peer's chain against `anchor`.
    static func evaluate(_ certificates: [Any], anchor: SecCertificate, at date: Date? = nil) -> (trusted: Bool, code: Int?) {
        var trust: SecTrust?
        guard SecTrustCreateWithCertificates(certificates as CFArray, SecPolicyCreateBasicX509(), &trust) == errSecSuccess, let trust else {
            return (false, nil)
        }
        SecTrustSetAnchorCertificates(trust, [anchor] as CFArray)
        SecTrustSetAnchorCertificatesOnly(trust, true)
        if let date { SecTrustSetVerifyDate(trust, date as CFDate) }
        var error: CFError?
        let trusted = SecTrustEvaluateWithError(trust, &error)
        let nsError = error as NSError?
        #expect(trusted == (nsError == nil))
        #expect(nsError.map { $0.domain == NSOSStatusErrorDomain } ?? true)
        return (trusted, nsError?.code)
    }

    @Test func pkcs12ImportGivesTheIdentityItsChainAndAStatus() throws {
        let alice = try Self.importIdentity("alice")
        #expect(alice.status == errSecSuccess)
        let identity = try #require(alice.identity)
        var leaf: SecCertificate?
        SecIdentityCopyCertificate(identity, &leaf)
        #expect(SecCertificateCopySubjectSummary(try #require(leaf)) == "alice")
        #expect(alice.chain.map { SecCertificateCopySubjectSummary($0) } == ["alice", "swift-multipeer Test Intermediate CA"])
        var commonName: CFString?
        #expect(SecCertificateCopyCommonName(alice.chain[1], &commonName) == errSecSuccess)
        #expect(commonName.map { $0 as String } == "swift-multipeer Test Intermediate CA")

        #expect(try Self.importIdentity("alice", password: "wrong").status == errSecAuthFailed)
        var items: CFArray?
        let options = [kSecImportExportPassphrase as String: "x"] as CFDictionary
        #expect(SecPKCS12Import(Data([0x30, 0x03, 0x02, 0x01, 0x00]) as CFData, options, &items) == errSecDecode)
        #expect(SecPKCS12Import(Data() as CFData, [:] as CFDictionary, &items) == errSecParam)
        #expect(items == nil)
    }

    @Test func trustFollowsTheTestPKI() throws {
        let root = try Self.certificate("ca/ca.pem")
        for name in ["alice", "bob", "carol"] {
            #expect(Self.evaluate(try Self.importIdentity(name).chain, anchor: root).trusted, "\(name)")
        }
        #expect(Self.evaluate(try Self.importIdentity("expired").chain, anchor: root).code == Int(errSecCertificateExpired))
        #expect(Self.evaluate(try Self.importIdentity("not-yet-valid").chain, anchor: root).code == Int(errSecCertificateNotValidYet))
        #expect(Self.evaluate(try Self.importIdentity("mallory").chain, anchor: root).code == Int(errSecNotTrusted))
        // Pinning: a self-signed peer trusted as its own anchor, and nobody else's.
        let solo = try Self.importIdentity("solo").chain
        #expect(Self.evaluate(solo, anchor: solo[0]).trusted)
        #expect(Self.evaluate(solo, anchor: root).code == Int(errSecNotTrusted))
        // The time validity is checked at: alice's certificate ends in 2044.
        let alice = try Self.importIdentity("alice").chain
        #expect(Self.evaluate(alice, anchor: root, at: Date(timeIntervalSince1970: 4_102_444_800)).code == Int(errSecCertificateExpired))
        // The trust that the import made has no anchors yet: nothing is trusted by default.
        let data = try Data(contentsOf: Self.directory.appendingPathComponent("peers/alice.p12"))
        var items: CFArray?
        _ = SecPKCS12Import(data as CFData, [kSecImportExportPassphrase as String: try Self.password] as CFDictionary, &items)
        let trust = try #require((items as? [[String: Any]])?.first?[kSecImportItemTrust as String] as? SecTrust)
        #expect(!SecTrustEvaluateWithError(trust, nil))
        SecTrustSetAnchorCertificates(trust, [root] as CFArray)
        #expect(SecTrustEvaluateWithError(trust, nil))
        var none: SecTrust?
        #expect(SecTrustCreateWithCertificates(["not a certificate"] as CFArray, nil, &none) == errSecParam)
    }

    @Test func asyncEvaluationAnswersOnTheGivenQueue() async throws {
        let root = try Self.certificate("ca/ca.pem")
        var trust: SecTrust?
        #expect(SecTrustCreateWithCertificates(try Self.importIdentity("bob").chain as CFArray, nil, &trust) == errSecSuccess)
        let bobTrust = try #require(trust)
        SecTrustSetAnchorCertificates(bobTrust, [root] as CFArray)
        let queue = DispatchQueue(label: "trust")
        let (answers, answer) = AsyncStream<Bool>.makeStream()
        SecTrustEvaluateAsyncWithError(bobTrust, queue) { _, trusted, error in
            dispatchPrecondition(condition: .onQueue(queue))
            answer.yield(trusted && error == nil)
        }
        #expect(try await firstMatch(in: answers, seconds: 10) { $0 })
    }

    /// The app's certificate handler decides with SecTrust; identities come from SecPKCS12Import.
    final class Gatekeeper: NSObject, MCSessionDelegate, Sendable {
        let anchor: SecCertificate
        let states: AsyncStream<(MCPeerID, MCSessionState)>
        private let continuation: AsyncStream<(MCPeerID, MCSessionState)>.Continuation

        init(anchor: SecCertificate) {
            self.anchor = anchor
            (states, continuation) = AsyncStream.makeStream()
        }

        func session(
            _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
            certificateHandler: @escaping (Bool) -> Void
        ) {
            guard let certificate else { return certificateHandler(false) }
            var trust: SecTrust?
            guard SecTrustCreateWithCertificates(certificate as CFArray, SecPolicyCreateBasicX509(), &trust) == errSecSuccess, let trust else {
                return certificateHandler(false)
            }
            SecTrustSetAnchorCertificates(trust, [anchor] as CFArray)
            certificateHandler(SecTrustEvaluateWithError(trust, nil))
        }

        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { continuation.yield((peerID, state)) }
        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
        func session(
            _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            with progress: Progress
        ) {}
        func session(
            _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            at localURL: URL?, withError error: (any Error)?
        ) {}
    }

    @Test func sessionsTrustPeersOfTheirCAAndRefuseOthers() async throws {
        let root = try Self.certificate("ca/ca.pem")
        func session(_ name: String) throws -> MCSession {
            let imported = try Self.importIdentity(name)
            // Apple's array: the identity, then the intermediates.
            let identity: [Any] = [try #require(imported.identity)] + Array(imported.chain.dropFirst())
            return MCSession(
                peer: MCPeerID(displayName: name), securityIdentity: identity, encryptionPreference: .required, configuration: .loopbackOnly)
        }
        let alice = try session("alice")
        let aliceGate = Gatekeeper(anchor: root)
        alice.delegate = aliceGate

        for (name, expected) in [("bob", MCSessionState.connected), ("mallory", .notConnected)] {
            let peer = try session(name)
            let gate = Gatekeeper(anchor: root)
            peer.delegate = gate
            let data = try await alice.nearbyConnectionData(forPeer: peer.myPeerID)
            peer.connectPeer(alice.myPeerID, withNearbyConnectionData: data)
            let peerID = peer.myPeerID
            let outcome = try await firstMatch(in: aliceGate.states, seconds: 20) { changed, state in
                changed == peerID && state != .connecting ? state : nil
            }
            #expect(outcome == expected, "\(name)")
            peer.disconnect()
        }
        alice.disconnect()
    }
}
