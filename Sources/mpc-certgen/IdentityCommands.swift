import ArgumentParser
import Foundation
import MultipeerCrypto

/// Options shared by both ways of making an identity.
struct IdentityOutputOptions: ParsableArguments {
    @Option(help: "The peer's display name; becomes the certificate's common name (1-63 bytes of UTF-8).")
    var name: String

    @OptionGroup var files: OutputOptions

    @Option(help: "A DNS name for subjectAltName (repeatable). Default: NAME.local, made DNS-safe.")
    var dns: [String] = []

    func validate() throws {
        guard !name.isEmpty, name.utf8.count <= 63 else { throw ValidationError("--name must be 1-63 bytes of UTF-8, like an MCPeerID display name") }
        guard !name.contains("/") else { throw ValidationError("--name must not contain '/' (it names the output files)") }
    }

    var dnsNames: [String] {
        if !dns.isEmpty { return dns }
        let label = name.lowercased().map { $0.isLetter && $0.isASCII || $0.isNumber && $0.isASCII ? $0 : "-" }
        let trimmed = String(label).trimmingCharacters(in: CharacterSet(charactersIn: "-"))
        return trimmed.isEmpty ? [] : [String(trimmed.prefix(63)) + ".local"]
    }

    /// Writes the chain, the (encrypted) key and the PKCS#12 file; all outputs are checked first.
    func write(_ identity: SecurityIdentity, password: String) throws {
        let (out, force) = (files.out, files.force)
        try Files.makeDirectory(out)
        let chainPath = Files.join(out, "\(name).pem")
        let keyPath = Files.join(out, "\(name).key")
        let pkcs12Path = Files.join(out, "\(name).p12")
        try Files.checkWritable([chainPath, keyPath, pkcs12Path], force: force)
        try Files.writePublic(identity.certificateChainPEM, to: chainPath, force: force)
        try Files.writePrivate(Array(try identity.privateKey.pemEncoded(passphrase: password).utf8), to: keyPath, force: force)
        try Files.writePrivate(try identity.pkcs12(password: password, friendlyName: name), to: pkcs12Path, force: force)
        let leaf = identity.certificate
        print("identity: \(leaf.subject), issued by \(leaf.issuer)")
        print("  chain:    \(chainPath) (\(identity.certificateChain.count) certificate(s), leaf first)")
        print("  key:      \(keyPath) (\(identity.privateKey.algorithm), encrypted, mode 0600)")
        print("  PKCS#12:  \(pkcs12Path) (mode 0600)")
        print("  SHA-256:  \(leaf.sha256FingerprintText)")
        print("  code:     \(ComparisonCode.make(for: leaf))")
    }
}

struct IdentityIssue: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "issue",
        abstract: "Issue a peer identity signed by a CA or intermediate.",
        discussion: """
            The certificate gets CN=NAME, subjectAltName, keyUsage digitalSignature, extendedKeyUsage clientAuth and serverAuth, basicConstraints CA:false, subject and authority key identifiers and a random 128-bit serial. NAME.pem holds the leaf followed by the issuing CA's chain (without a self-signed root); NAME.p12 holds the same, and loads with SecurityIdentity(pkcs12File:password:).
            """)

    @OptionGroup var output: IdentityOutputOptions

    @Option(help: "The issuing CA's certificate (PEM); for an intermediate, the file may also hold its chain.")
    var ca: String

    @Option(help: "The issuing CA's private key (PEM).")
    var caKey: String

    @Option(help: "File whose first line is the CA key's passphrase, if it is encrypted.")
    var caKeyPasswordFile: String?

    @OptionGroup var validity: ValidityOptions
    @OptionGroup var passwords: PasswordOptions

    func run() throws {
        let password = try passwords.resolve(required: true)!
        let (start, end) = try validity.window()
        let caPassphrase = try caKeyPasswordFile.map(PasswordOptions.firstLine(of:))
        let authority = try LoadedAuthority(certificatePath: ca, keyPath: caKey, passphrase: caPassphrase)
        let key = try PrivateKey.generate(output.files.keyType.algorithm)
        let leaf = try CertificateBuilder(
            commonName: output.name, dnsNames: output.dnsNames, notValidBefore: start, notValidAfter: end, role: .peer
        ).issue(for: key, issuer: (authority.certificate, authority.key))
        try output.write(try SecurityIdentity(privateKey: key, certificateChain: [leaf] + authority.chainAbovePeers), password: password)
    }
}

struct IdentitySelfSigned: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "self-signed",
        abstract: "Make a single self-signed identity, for setups that pin certificates.",
        discussion: "Peers trust it by its fingerprint: pass the certificate itself as the only anchor.")

    @OptionGroup var output: IdentityOutputOptions
    @OptionGroup var validity: ValidityOptions
    @OptionGroup var passwords: PasswordOptions

    func run() throws {
        let password = try passwords.resolve(required: true)!
        let (start, end) = try validity.window()
        let key = try PrivateKey.generate(output.files.keyType.algorithm)
        let certificate = try CertificateBuilder(
            commonName: output.name, dnsNames: output.dnsNames, notValidBefore: start, notValidAfter: end, role: .peer
        ).issue(for: key)
        try output.write(try SecurityIdentity(privateKey: key, certificateChain: [certificate]), password: password)
    }
}
