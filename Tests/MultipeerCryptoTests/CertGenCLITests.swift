import Foundation
import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// mpc-certgen as a user runs it, checked by independent tools (openssl, pyca/cryptography).
@Suite("mpc-certgen", .serialized)
struct CertGenCLITests {
    let directory: URL
    let certgen: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("certgen-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        certgen = try BuiltProducts.executable("mpc-certgen")
        try "s3cret\n".write(to: directory.appendingPathComponent("pw"), atomically: true, encoding: .utf8)
    }

    private func certgen(_ arguments: String...) async throws -> (status: Int32, output: String) {
        try await BuiltProducts.run(certgen, arguments, in: directory)
    }

    private func openssl(_ arguments: String...) async throws -> (status: Int32, output: String) {
        try await BuiltProducts.run(URL(fileURLWithPath: "/usr/bin/openssl"), arguments, in: directory)
    }

    private func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(path).path)[.posixPermissions] as? Int) ?? -1
    }

    @Test(arguments: ["ed25519", "p256", "rsa3072"])
    func issuedIdentitiesPassIndependentChecks(keyType: String) async throws {
        #expect(try await certgen("ca", "create", "--name", "CLI Root", "--intermediate", "CLI Intermediate", "--out", "ca", "--key-type", keyType).status == 0)
        let issued = try await certgen("identity", "issue", "--name", "alice", "--ca", "ca/intermediate.pem", "--ca-key", "ca/intermediate.key",
            "--out", "alice", "--password-file", "pw", "--key-type", keyType)
        #expect(issued.status == 0, "\(issued.output)")
        #expect(!issued.output.contains("PRIVATE KEY"), "a key was printed")
        #expect(try mode("alice/alice.key") == 0o600)
        #expect(try mode("alice/alice.p12") == 0o600)
        #expect(try mode("ca/ca.key") == 0o600)

        let verified = try await openssl("verify", "-purpose", "sslclient", "-CAfile", "ca/ca.pem", "-untrusted", "ca/intermediate.pem", "alice/alice.pem")
        #expect(verified.status == 0 && verified.output.contains("OK"), "\(verified.output)")
        let serverPurpose = try await openssl("verify", "-purpose", "sslserver", "-CAfile", "ca/ca.pem", "-untrusted", "ca/intermediate.pem", "alice/alice.pem")
        #expect(serverPurpose.status == 0, "\(serverPurpose.output)")
        let pkcs12 = try await openssl("pkcs12", "-in", "alice/alice.p12", "-passin", "pass:s3cret", "-nokeys")
        #expect(pkcs12.status == 0 && pkcs12.output.components(separatedBy: "BEGIN CERTIFICATE").count == 3, "\(pkcs12.output)")
        let python = try await BuiltProducts.run(URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", repositoryRootURL.appendingPathComponent("Tests/Scripts/check_certificate.py").path, "alice/alice.pem", "ca/ca.pem"], in: directory)
        #expect(python.status == 0 && python.output.hasPrefix("OK"), "\(python.output)")
        #expect(try await certgen("verify", "alice/alice.pem", "--anchors", "ca/ca.pem").status == 0)

        // The library loads what the CLI wrote, from PKCS#12 and from PEM with the password.
        let fromPKCS12 = try SecurityIdentity(pkcs12File: directory.appendingPathComponent("alice/alice.p12").path, password: "s3cret")
        let fromPEM = try SecurityIdentity(
            certificateChainFile: directory.appendingPathComponent("alice/alice.pem").path,
            privateKeyFile: directory.appendingPathComponent("alice/alice.key").path, passphrase: "s3cret")
        #expect(fromPKCS12.certificateChain == fromPEM.certificateChain)
        #expect(fromPKCS12.certificateChain.count == 2)
        #expect(fromPKCS12.certificate.subjectCommonName == "alice")
        try? FileManager.default.removeItem(at: directory)
    }

    @Test func inspectShowsEveryFormatAndNeverTheKey() async throws {
        #expect(try await certgen("identity", "self-signed", "--name", "solo", "--out", "solo", "--password-file", "pw").status == 0)
        #expect(try await openssl("x509", "-in", "solo/solo.pem", "-outform", "DER", "-out", "solo/solo.der").status == 0)
        let leaf = try Certificate(pemEncoded: String(contentsOf: directory.appendingPathComponent("solo/solo.pem"), encoding: .utf8))
        for (file, extra) in [("solo/solo.pem", [String]()), ("solo/solo.der", []), ("solo/solo.p12", ["--password-file", "pw"])] {
            let shown = try await BuiltProducts.run(certgen, ["inspect", file] + extra, in: directory)
            #expect(shown.status == 0, "\(shown.output)")
            #expect(shown.output.contains("subject:     CN=solo"))
            #expect(shown.output.contains(leaf.sha256FingerprintText))
            #expect(shown.output.contains(ComparisonCode.make(for: leaf)))
            #expect(!shown.output.contains("PRIVATE"))
        }
        try? FileManager.default.removeItem(at: directory)
    }

    @Test func badInputFailsClearlyAndWritesNothing() async throws {
        #expect(try await certgen("ca", "create", "--name", "Root", "--out", "ca").status == 0)
        #expect(try await certgen("ca", "create", "--name", "Other", "--out", "other").status == 0)
        #expect(try await certgen("ca", "create", "--name", "Locked", "--out", "locked", "--password-file", "pw").status == 0)
        try "nope\n".write(to: directory.appendingPathComponent("wrong"), atomically: true, encoding: .utf8)
        let cases: [([String], String)] = [
            (["identity", "issue", "--name", "x", "--ca", "locked/ca.pem", "--ca-key", "locked/ca.key", "--ca-key-password-file", "wrong", "--out", "x", "--password-file", "pw"], "passphrase"),
            (["identity", "issue", "--name", "x", "--ca", "locked/ca.pem", "--ca-key", "locked/ca.key", "--out", "x", "--password-file", "pw"], "passphrase"),
            (["identity", "issue", "--name", "x", "--ca", "missing.pem", "--ca-key", "ca/ca.key", "--out", "x", "--password-file", "pw"], "cannot read"),
            (["identity", "issue", "--name", "x", "--ca", "ca/ca.pem", "--ca-key", "other/ca.key", "--out", "x", "--password-file", "pw"], "is not the key"),
            (["identity", "issue", "--name", "x", "--ca", "ca/ca.pem", "--ca-key", "ca/ca.key", "--out", "x"], "password is required"),
            (["identity", "issue", "--name", "x", "--ca", "ca/ca.pem", "--ca-key", "ca/ca.key", "--out", "x", "--password-file", "pw", "--not-before", "2001-01-01"], "already have ended"),
            (["identity", "issue", "--name", "", "--ca", "ca/ca.pem", "--ca-key", "ca/ca.key", "--out", "x", "--password-file", "pw"], "--name"),
            (["identity", "self-signed", "--name", "x", "--out", "x", "--password-file", "pw", "--days", "0"], "--days"),
            (["inspect", "solo.p12-missing"], "cannot read"),
        ]
        for (arguments, expected) in cases {
            let result = try await BuiltProducts.run(certgen, arguments, in: directory)
            #expect(result.status != 0, "\(arguments) succeeded")
            #expect(result.output.contains(expected), "\(arguments): \(result.output)")
            #expect(!result.output.contains("Fatal error"))
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("x").path))
        // A wrong PKCS#12 password, and a refused overwrite.
        #expect(try await certgen("identity", "self-signed", "--name", "solo", "--out", "solo", "--password-file", "pw").status == 0)
        let wrong = try await certgen("inspect", "solo/solo.p12", "--password", "wrong")
        #expect(wrong.status != 0 && wrong.output.contains("password"), "\(wrong.output)")
        let again = try await certgen("identity", "self-signed", "--name", "solo", "--out", "solo", "--password-file", "pw")
        #expect(again.status != 0 && again.output.contains("refusing to overwrite"))
        #expect(try await certgen("identity", "self-signed", "--name", "solo", "--out", "solo", "--password-file", "pw", "--force").status == 0)
        // Verification failure has a reason and exit status 1.
        let untrusted = try await certgen("verify", "solo/solo.pem", "--anchors", "ca/ca.pem")
        #expect(untrusted.status == 1 && untrusted.output.contains("NOT TRUSTED"))
        try? FileManager.default.removeItem(at: directory)
    }

    @Test func everyCommandHasCompleteHelp() async throws {
        for command in [["--help"], ["ca", "create", "--help"], ["identity", "issue", "--help"], ["identity", "self-signed", "--help"],
                        ["inspect", "--help"], ["verify", "--help"]] {
            let help = try await BuiltProducts.run(certgen, command)
            #expect(help.status == 0)
            #expect(help.output.contains("USAGE"))
        }
        let issueHelp = try await BuiltProducts.run(certgen, ["identity", "issue", "--help"]).output
        for option in ["--name", "--ca", "--ca-key", "--out", "--key-type", "--days", "--not-before", "--password-file", "--force"] {
            #expect(issueHelp.contains(option))
        }
    }
}
