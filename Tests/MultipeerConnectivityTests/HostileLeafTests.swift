import Foundation
import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// Peer certificates that chain to the app's CA yet identify no peer: a leaf marked CA:TRUE
/// (keyUsage digitalSignature alone), and a leaf named "CN=bob, CN=mallory". Apps that check
/// "chains to the CA and its common name is the display name" accepted both as bob.
@Suite("Hostile peer leaves under the app's CA")
struct HostileLeafTests {
    static let pki = try! TestPKI()

    enum Kind: String, CaseIterable, Sendable {
        case plain, certificateAuthority, twoCommonNames
    }

    static func bob(_ kind: Kind) throws -> SecurityIdentity {
        switch kind {
        case .plain: try pki.peer("bob")
        case .certificateAuthority: try pki.peer("bob") { $0.marksPeerAsCertificateAuthority = true }
        case .twoCommonNames: try pki.peer("bob") { $0.additionalCommonNames = ["mallory"] }
        }
    }

    /// The check as Apple's code writes it: SecTrust to the CA, then the leaf's common name.
    static func appleStyleAccepts(_ peer: MCPeerID, _ certificates: [Any]?, anchor: SecCertificate) -> Bool {
        guard let chain = certificates as? [SecCertificate], let leaf = chain.first else { return false }
        var trust: SecTrust?
        guard SecTrustCreateWithCertificates(chain as CFArray, SecPolicyCreateBasicX509(), &trust) == errSecSuccess, let trust else {
            return false
        }
        SecTrustSetAnchorCertificates(trust, [anchor] as CFArray)
        guard SecTrustEvaluateWithError(trust, nil) else { return false }
        var name: CFString?
        return SecCertificateCopyCommonName(leaf, &name) == errSecSuccess && name.map { $0 as String } == peer.displayName
    }

    /// The same check with the Swift-native API.
    static func nativeAccepts(_ request: MCTrustRequest, anchors: [Certificate]) -> Bool {
        guard let chain = request.certificates?.map(\.certificate), let leaf = chain.first else { return false }
        return TrustEvaluation(anchors: anchors).evaluate(chain).isTrusted && leaf.subjectCommonName == request.peer.displayName
    }

    @Test func appleSecurityCallsRefuseThem() throws {
        let anchor = SecCertificate(Self.pki.root)
        for kind in Kind.allCases {
            let chain = try Self.bob(kind).certificateChain.map(SecCertificate.init)
            var trust: SecTrust?
            #expect(SecTrustCreateWithCertificates(chain as CFArray, nil, &trust) == errSecSuccess)
            let evaluated = try #require(trust)
            SecTrustSetAnchorCertificates(evaluated, [anchor] as CFArray)
            var error: CFError?
            let trusted = SecTrustEvaluateWithError(evaluated, &error)
            let nsError = error as NSError?
            switch kind {
            case .plain:
                #expect(trusted && nsError == nil)
            case .certificateAuthority:
                #expect(!trusted && nsError?.code == Int(errSecNotTrusted))
                #expect(nsError?.localizedDescription.contains("leafIsCertificateAuthority") == true)
            case .twoCommonNames:
                #expect(!trusted && nsError?.code == Int(errSecNotTrusted))
                #expect(nsError?.localizedDescription.contains("ambiguousCommonName") == true)
            }
        }
        // Two common names: no single one to hand out; the summary shows them all.
        let ambiguous = SecCertificate(try Self.bob(.twoCommonNames).certificate)
        var name: CFString?
        #expect(SecCertificateCopyCommonName(ambiguous, &name) == errSecParam)
        #expect(name == nil)
        let summary = try #require(SecCertificateCopySubjectSummary(ambiguous))
        #expect(summary.contains("bob") && summary.contains("mallory"))
    }

    /// Over loopback: bob dials a listener that checks with Apple's calls and one that checks
    /// with TrustEvaluation; only the plain bob connects.
    @Test(arguments: Kind.allCases)
    func sessionsRefuseThemOverLoopback(kind: Kind) async throws {
        let alice = try Self.pki.peer("alice")
        let anchor = SecCertificate(Self.pki.root)
        let anchors = [Self.pki.root]
        let appleStyle = MCSession(
            peer: MCPeerID(displayName: "alice"), securityIdentity: [SecIdentity(alice)], encryptionPreference: .required,
            configuration: .loopbackOnly)
        let appleDelegate = RecordingDelegate { peer, certificates in Self.appleStyleAccepts(peer, certificates, anchor: anchor) }
        appleStyle.delegate = appleDelegate
        let native = try MCSession(peer: MCPeerID(displayName: "alice2"), identity: alice, configuration: .loopbackOnly)
        let nativeDelegate = RecordingDelegate()
        native.delegate = nativeDelegate
        native.setTrustEvaluator { request in Self.nativeAccepts(request, anchors: anchors) }

        for (listener, delegate) in [(appleStyle, appleDelegate), (native, nativeDelegate)] {
            let bob = try MCSession(peer: MCPeerID(displayName: "bob"), identity: try Self.bob(kind), configuration: .loopbackOnly)
            let bobDelegate = RecordingDelegate()
            bob.delegate = bobDelegate
            let data = try await listener.nearbyConnectionData(forPeer: bob.myPeerID)
            bob.connectPeer(listener.myPeerID, withNearbyConnectionData: data)
            let expected: MCSessionState = kind == .plain ? .connected : .notConnected
            let settled = try await eventually(seconds: 20) {
                delegate.states(of: bob.myPeerID).last == expected && bobDelegate.states(of: listener.myPeerID).last == expected
            }
            #expect(settled, "\(kind) at \(listener.myPeerID.displayName): \(delegate.states(of: bob.myPeerID))")
            if kind != .plain {
                #expect(!delegate.states(of: bob.myPeerID).contains(.connected))
                #expect(!bobDelegate.states(of: listener.myPeerID).contains(.connected))
                #expect(listener.connectedPeers.isEmpty)
            }
            await bob.disconnectAndWait()
        }
        await appleStyle.disconnectAndWait()
        await native.disconnectAndWait()
    }
}
