import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import Testing

@Suite("Certificates, keys and identities")
struct CertificateTests {
    @Test(arguments: [KeyAlgorithm.ed25519, .ecdsaP256, .rsa(bits: 2048)])
    func issuedCertificatesDescribeThemselves(algorithm: KeyAlgorithm) throws {
        let pki = try TestPKI(keyAlgorithm: algorithm)
        let alice = try pki.peer("alice", algorithm: algorithm)
        let leaf = alice.certificate
        #expect(leaf.subjectCommonName == "alice")
        #expect(leaf.subject == "CN=alice")
        #expect(leaf.issuerCommonName == "Test Intermediate CA")
        #expect(leaf.publicKeyAlgorithm == algorithm)
        #expect(!leaf.isCertificateAuthority)
        #expect(pki.intermediate.isCertificateAuthority)
        #expect(pki.root.subject == "CN=Test Root CA,O=swift-multipeer tests")
        #expect(leaf.serialNumberHex.count == 32)
        let sibling = try pki.peer("alice")
        #expect(leaf.serialNumberHex != sibling.certificate.serialNumberHex)
        #expect(leaf.notValidBefore < Date())
        #expect(leaf.notValidAfter > Date())
        #expect(leaf.sha256Fingerprint.count == 32)
        #expect(leaf.sha256FingerprintText.split(separator: ":").count == 32)
    }

    @Test func derAndPEMRoundTrip() throws {
        let certificate = try TestPKI().root
        #expect(try Certificate(derEncoded: certificate.derEncoded) == certificate)
        #expect(try Certificate(pemEncoded: certificate.pemEncoded) == certificate)
        #expect(certificate.pemEncoded.hasPrefix("-----BEGIN CERTIFICATE-----\n"))
        #expect(throws: SecurityError.self) { try Certificate(derEncoded: [0x30, 0x03, 0x02, 0x01]) }
        #expect(throws: SecurityError.self) { try Certificate(pemEncoded: "nothing here") }
        #expect(throws: SecurityError.self) { try Certificate.chain(pemEncoded: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") }
    }

    @Test func unicodeNamesSurvive() throws {
        let key = try PrivateKey.generate()
        let certificate = try CertificateBuilder(commonName: "Zoë’s iPad 😀").issue(for: key)
        #expect(certificate.subjectCommonName == "Zoë’s iPad 😀")
    }

    @Test func builderRefusesBadInput() throws {
        let key = try PrivateKey.generate()
        let other = try PrivateKey.generate()
        let ca = try CertificateBuilder(commonName: "CA", role: .certificateAuthority(pathLength: nil)).issue(for: key)
        #expect(throws: SecurityError.self) { try CertificateBuilder(commonName: "").issue(for: key) }
        #expect(throws: SecurityError.self) {
            try CertificateBuilder(commonName: "x", notValidBefore: Date(), notValidAfter: Date(timeIntervalSinceNow: -1)).issue(for: key)
        }
        do {
            _ = try CertificateBuilder(commonName: "x").issue(for: key, issuer: (ca, other))
            Issue.record("an issuer key that does not match its certificate was accepted")
        } catch {
            #expect(error.code == .keyMismatch)
        }
        #expect(throws: SecurityError.self) { try PrivateKey.generate(.rsa(bits: 1024)) }
    }

    @Test func pemIdentityWithEncryptedKey() throws {
        let alice = try TestPKI().peer("alice")
        let keyPEM = try alice.privateKey.pemEncoded(passphrase: "correct horse")
        #expect(keyPEM.contains("ENCRYPTED PRIVATE KEY"))
        let loaded = try SecurityIdentity(certificateChainPEM: alice.certificateChainPEM, privateKeyPEM: keyPEM, passphrase: "correct horse")
        #expect(loaded.certificateChain == alice.certificateChain)
        #expect(loaded.privateKey.matches(alice.certificate))

        for wrong: String? in ["battery staple", nil] {
            do {
                _ = try SecurityIdentity(certificateChainPEM: alice.certificateChainPEM, privateKeyPEM: keyPEM, passphrase: wrong)
                Issue.record("a wrong passphrase was accepted")
            } catch {
                #expect(error.code == .wrongPassword)
            }
        }
        let plain = try alice.privateKey.pemEncoded()
        #expect(plain.contains("BEGIN PRIVATE KEY"))
        #expect(try SecurityIdentity(certificateChainPEM: alice.certificateChainPEM, privateKeyPEM: plain).certificate == alice.certificate)
    }

    @Test func mismatchedKeyIsRefused() throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice")
        let bob = try pki.peer("bob")
        do {
            _ = try SecurityIdentity(privateKey: bob.privateKey, certificateChain: alice.certificateChain)
            Issue.record("a key that does not match its certificate was accepted")
        } catch {
            #expect(error.code == .keyMismatch)
        }
        #expect(throws: SecurityError.self) { try SecurityIdentity(privateKey: bob.privateKey, certificateChain: []) }
    }

    @Test func pkcs12RoundTripAndWrongPassword() throws {
        let alice = try TestPKI().peer("alice", algorithm: .ecdsaP256)
        let container = try alice.pkcs12(password: "s3cret", friendlyName: "alice")
        let loaded = try SecurityIdentity(pkcs12: container, password: "s3cret")
        #expect(loaded.certificateChain == alice.certificateChain)
        #expect(loaded.privateKey.algorithm == .ecdsaP256)
        do {
            _ = try SecurityIdentity(pkcs12: container, password: "wrong")
            Issue.record("wrong PKCS#12 password accepted")
        } catch {
            #expect(error.code == .wrongPassword)
        }
        do {
            _ = try SecurityIdentity(pkcs12: Array(container.prefix(40)), password: "s3cret")
            Issue.record("truncated PKCS#12 accepted")
        } catch {
            #expect(error.code == .malformedData)
        }
    }

    @Test func filesThatCannotBeReadAreReported() {
        do {
            _ = try SecurityIdentity(pkcs12File: "/nonexistent/identity.p12", password: "x")
            Issue.record("a missing file was accepted")
        } catch {
            #expect(error.code == .unreadableFile)
        }
    }

    /// OpenSSL's own command line tool agrees with what the builder wrote.
    @Test func opensslCommandLineVerifiesTheChain() throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mpc-pki-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try pki.root.pemEncoded.write(to: directory.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        try pki.intermediate.pemEncoded.write(to: directory.appendingPathComponent("intermediate.pem"), atomically: true, encoding: .utf8)
        try alice.certificate.pemEncoded.write(to: directory.appendingPathComponent("alice.pem"), atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["verify", "-purpose", "sslclient", "-CAfile", "root.pem", "-untrusted", "intermediate.pem", "alice.pem"]
        process.currentDirectoryURL = directory
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(text)")
        #expect(text.contains("alice.pem: OK"))
    }
}

@Suite("Trust evaluation")
struct TrustEvaluationTests {
    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    private func failure(_ outcome: TrustEvaluation.Outcome) -> TrustEvaluation.Failure.Reason? {
        if case .untrusted(let failure) = outcome { return failure.reason }
        return nil
    }

    @Test func chainWithIntermediateIsTrustedByItsRoot() throws {
        let alice = try pki.peer("alice")
        #expect(TrustEvaluation(anchors: [pki.root]).evaluate(alice.certificateChain) == .trusted)
        // Without the intermediate the leaf cannot be tied to the root.
        #expect(failure(TrustEvaluation(anchors: [pki.root]).evaluate([alice.certificate])) == .unknownIssuer)
    }

    @Test func expiredAndNotYetValid() throws {
        let expired = try pki.peer("old", notValidBefore: Date(timeIntervalSinceNow: -7200), notValidAfter: Date(timeIntervalSinceNow: -3600))
        let future = try pki.peer("future", notValidBefore: Date(timeIntervalSinceNow: 3600), notValidAfter: Date(timeIntervalSinceNow: 7200))
        let evaluation = TrustEvaluation(anchors: [pki.root])
        #expect(failure(evaluation.evaluate(expired.certificateChain)) == .expired)
        #expect(failure(evaluation.evaluate(future.certificateChain)) == .notYetValid)
        // The validation time is the app's to choose.
        #expect(TrustEvaluation(anchors: [pki.root], validationTime: Date(timeIntervalSinceNow: -5400)).evaluate(expired.certificateChain) == .trusted)
    }

    @Test func unrelatedCAAndSelfSigned() throws {
        let stranger = try TestPKI(name: "Other").peer("mallory")
        #expect(failure(TrustEvaluation(anchors: [pki.root]).evaluate(stranger.certificateChain)) == .unknownIssuer)
        let key = try PrivateKey.generate()
        let selfSigned = try CertificateBuilder(commonName: "solo").issue(for: key)
        #expect(failure(TrustEvaluation(anchors: [pki.root]).evaluate([selfSigned])) == .selfSigned)
        // Pinning: a self-signed peer certificate is trusted when it is itself the anchor.
        #expect(TrustEvaluation(anchors: [selfSigned]).evaluate([selfSigned]) == .trusted)
        #expect(failure(TrustEvaluation(anchors: [pki.root]).evaluate([])) == .noCertificate)
    }

    @Test func depthAndCAConstraintsApply() throws {
        let alice = try pki.peer("alice")
        #expect(failure(TrustEvaluation(anchors: [pki.root], maximumDepth: 0).evaluate(alice.certificateChain)) == .chainTooLong)
        // A peer certificate cannot act as a CA for another.
        let bobKey = try PrivateKey.generate()
        let bob = try CertificateBuilder(commonName: "bob").issue(for: bobKey, issuer: (alice.certificate, alice.privateKey))
        #expect(!TrustEvaluation(anchors: [pki.root]).evaluate([bob, alice.certificate, pki.intermediate]).isTrusted)
    }

    /// A root that the openssl command line can also sign with, for what the builder refuses to make.
    private func commandLineRoot() throws -> (root: Certificate, key: PrivateKey, cli: CommandLinePKI) {
        let key = try PrivateKey.generate()
        let root = try CertificateBuilder(commonName: "Root", role: .certificateAuthority(pathLength: nil)).issue(for: key)
        let cli = try CommandLinePKI()
        try cli.add("root", certificate: root, key: key)
        return (root, key, cli)
    }

    /// Keys under 112-bit security (OpenSSL level 2: RSA under 2048 bits) are refused, in the
    /// leaf and in the CAs above it.
    @Test func weakKeysAreRefused() throws {
        let (root, rootKey, cli) = try commandLineRoot()
        let evaluation = TrustEvaluation(anchors: [root])
        let normal = try CertificateBuilder(commonName: "alice").issue(for: try PrivateKey.generate(), issuer: (root, rootKey))
        #expect(evaluation.evaluate([normal]) == .trusted)
        #expect(evaluation.evaluate([try cli.issue("strong", newKey: "rsa:2048", extensions: "peer", issuer: "root").certificate]) == .trusted)

        let weak = try cli.issue("weak", newKey: "rsa:1024", extensions: "peer", issuer: "root").certificate
        #expect(weak.publicKeyAlgorithm == .rsa(bits: 1024))
        #expect(failure(evaluation.evaluate([weak])) == .weakKey)

        let weakCA = try cli.issue("weakca", newKey: "rsa:1024", extensions: "ca", issuer: "root").certificate
        let belowWeakCA = try cli.issue("below", newKey: "ed25519", extensions: "peer", issuer: "weakca").certificate
        #expect(failure(evaluation.evaluate([belowWeakCA, weakCA])) == .weakKey)
    }

    /// A peer identity is an end entity: a leaf marked as a CA could issue certificates of its own.
    @Test func aLeafThatIsACertificateAuthorityIsRefused() throws {
        let (root, rootKey, cli) = try commandLineRoot()
        let evaluation = TrustEvaluation(anchors: [root])
        #expect(evaluation.evaluate([try CertificateBuilder(commonName: "alice").issue(for: try PrivateKey.generate(), issuer: (root, rootKey))]) == .trusted)

        // The builder makes a CA certificate when asked for one.
        let builtCA = try CertificateBuilder(commonName: "mallory", role: .certificateAuthority(pathLength: 0))
            .issue(for: try PrivateKey.generate(), issuer: (root, rootKey))
        #expect(builtCA.isCertificateAuthority)
        #expect(failure(evaluation.evaluate([builtCA])) == .leafIsCertificateAuthority)

        // CA:TRUE with the client and server purposes of a peer certificate.
        let peerLikeCA = try cli.issue("capeer", newKey: "ed25519", extensions: "capeer", issuer: "root").certificate
        #expect(failure(evaluation.evaluate([peerLikeCA])) == .leafIsCertificateAuthority)

        // Pinning a CA certificate as its own anchor does not make it a peer identity.
        let selfSignedCA = try CertificateBuilder(commonName: "pinned", role: .certificateAuthority(pathLength: nil)).issue(for: try PrivateKey.generate())
        #expect(failure(TrustEvaluation(anchors: [selfSignedCA]).evaluate([selfSignedCA])) == .leafIsCertificateAuthority)
    }

    /// CA:TRUE with keyUsage digitalSignature alone, issued by the intermediate: OpenSSL's
    /// X509_check_ca calls it no CA (keyUsage forbids signing), yet it is a CA certificate to
    /// RFC 5280 and to verifiers that skip keyUsage. It was accepted as a peer.
    @Test func aCATrueLeafWhoseKeyUsageForbidsSigningIsRefused() throws {
        let pki = try TestPKI()
        let evaluation = TrustEvaluation(anchors: [pki.root])
        #expect(evaluation.evaluate(try pki.peer("bob").certificateChain) == .trusted)

        let built = try pki.peer("bob") { $0.marksPeerAsCertificateAuthority = true }
        #expect(!built.certificate.isCertificateAuthority)
        #expect(!built.certificate.isEndEntity)
        #expect(failure(evaluation.evaluate(built.certificateChain)) == .leafIsCertificateAuthority)

        // The same made by the openssl command line, as the outside probe made it.
        let cli = try CommandLinePKI()
        try cli.add("intermediate", certificate: pki.intermediate, key: pki.intermediateKey)
        let issued = try cli.issue("bob", newKey: "ed25519", extensions: "capeer_nosign", issuer: "intermediate").certificate
        #expect(!issued.isEndEntity)
        #expect(failure(evaluation.evaluate([issued, pki.intermediate])) == .leafIsCertificateAuthority)
        #expect(try pki.peer("alice").certificate.isEndEntity)
    }

    /// A subject "CN=bob, CN=mallory" names nobody in particular: readers differ on which CN
    /// counts. It was accepted as bob (the first CN).
    @Test func aLeafWithTwoCommonNamesIsRefused() throws {
        let pki = try TestPKI()
        let evaluation = TrustEvaluation(anchors: [pki.root])
        let built = try pki.peer("bob") { $0.additionalCommonNames = ["mallory"] }
        #expect(built.certificate.subjectCommonNames == ["bob", "mallory"])
        #expect(built.certificate.subjectCommonName == nil)
        #expect(failure(evaluation.evaluate(built.certificateChain)) == .ambiguousCommonName)

        // From the openssl command line: two RDNs, and one multi-valued RDN.
        let cli = try CommandLinePKI()
        try cli.add("intermediate", certificate: pki.intermediate, key: pki.intermediateKey)
        for subject in ["/CN=bob/CN=mallory", "/CN=bob+CN=mallory", "/O=x/CN=bob/OU=y/CN=mallory"] {
            let issued = try cli.issue("bob", newKey: "ed25519", extensions: "peer", issuer: "intermediate", subject: subject).certificate
            #expect(issued.subjectCommonName == nil, "\(subject)")
            #expect(Set(issued.subjectCommonNames) == ["bob", "mallory"], "\(subject)")
            #expect(failure(evaluation.evaluate([issued, pki.intermediate])) == .ambiguousCommonName, "\(subject)")
        }

        // One CN, or none, is no ambiguity; the issuer's names are read the same way.
        let single = try pki.peer("bob").certificate
        #expect(single.subjectCommonNames == ["bob"] && single.subjectCommonName == "bob")
        #expect(single.issuerCommonNames == ["Test Intermediate CA"] && single.issuerCommonName == "Test Intermediate CA")
        let nameless = try cli.issue("nameless", newKey: "ed25519", extensions: "peer", issuer: "intermediate", subject: "/O=x").certificate
        #expect(nameless.subjectCommonNames.isEmpty && nameless.subjectCommonName == nil)
        #expect(evaluation.evaluate([nameless, pki.intermediate]) == .trusted)
    }
}

@Suite("Comparison code")
struct ComparisonCodeTests {
    @Test func bothSidesComputeTheSameCodeAndOtherPairsDiffer() throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice").certificate
        let bob = try pki.peer("bob").certificate
        let mallory = try pki.peer("mallory").certificate
        let code = ComparisonCode.make(alice, bob)
        #expect(code == ComparisonCode.make(bob, alice))
        #expect(code.count == 7 && code.filter(\.isNumber).count == 6)
        #expect(code != ComparisonCode.make(alice, mallory))
    }
}

@Suite("Unsupported keys")
struct UnsupportedKeyTests {
    private func opensslKey(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["genpkey"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = Pipe()
        try process.run()
        let pem = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0)
        return pem
    }

    @Test(arguments: [
        ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"],
        ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
        ["-algorithm", "X448"],
    ])
    func keysOutsideTheAllowedSetAreRefused(arguments: [String]) throws {
        let pem = try opensslKey(arguments)
        do {
            _ = try PrivateKey(pemEncoded: pem)
            Issue.record("accepted \(arguments)")
        } catch {
            #expect(error.code == .unsupportedKeyType)
        }
    }

    @Test func allowedKeysFromOpenSSLLoad() throws {
        #expect(try PrivateKey(pemEncoded: try opensslKey(["-algorithm", "ED25519"])).algorithm == .ed25519)
        #expect(try PrivateKey(pemEncoded: try opensslKey(["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])).algorithm == .ecdsaP256)
        #expect(try PrivateKey(pemEncoded: try opensslKey(["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])).algorithm == .rsa(bits: 2048))
    }
}
