import ArgumentParser
import Foundation
import MultipeerCrypto

struct CACreate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a root CA, optionally with an intermediate CA signed by it.",
        discussion: """
            Writes OUT/ca.pem and OUT/ca.key, and with --intermediate also OUT/intermediate.pem
            (the intermediate followed by the root) and OUT/intermediate.key. Keys are encrypted
            when a password is given. Issue peers from the intermediate and keep the root key offline.
            """)

    @Option(help: "Common name of the root CA.")
    var name: String

    @Option(help: "Directory to write to (created if missing).")
    var out: String

    @Option(help: "Key type: \(KeyType.allCases.map(\.rawValue).joined(separator: ", ")).")
    var keyType: KeyType = .ed25519

    @Option(help: "Also create an intermediate CA with this common name.")
    var intermediate: String?

    @OptionGroup var validity: ValidityOptions
    @OptionGroup var passwords: PasswordOptions

    @Flag(help: "Overwrite existing files.")
    var force = false

    func run() throws {
        let (start, end) = try validity.window()
        let passphrase = try passwords.resolve(required: false)
        try Files.makeDirectory(out)
        let rootPath = Files.join(out, "ca.pem")
        let rootKeyPath = Files.join(out, "ca.key")
        let intermediatePath = Files.join(out, "intermediate.pem")
        let intermediateKeyPath = Files.join(out, "intermediate.key")
        try Files.checkWritable([rootPath, rootKeyPath] + (intermediate == nil ? [] : [intermediatePath, intermediateKeyPath]), force: force)

        let rootKey = try PrivateKey.generate(keyType.algorithm)
        let root = try CertificateBuilder(
            commonName: name, notValidBefore: start, notValidAfter: end,
            role: .certificateAuthority(pathLength: intermediate == nil ? 0 : 1)
        ).issue(for: rootKey)
        try Files.writePublic(root.pemEncoded, to: rootPath, force: force)
        try Files.writePrivate(Array(try rootKey.pemEncoded(passphrase: passphrase).utf8), to: rootKeyPath, force: force)
        print("root CA:         \(rootPath) (\(root.subject), \(keyType.algorithm), SHA-256 \(root.sha256FingerprintText))")

        if let intermediate {
            let key = try PrivateKey.generate(keyType.algorithm)
            let certificate = try CertificateBuilder(
                commonName: intermediate, notValidBefore: start, notValidAfter: end, role: .certificateAuthority(pathLength: 0)
            ).issue(for: key, issuer: (root, rootKey))
            try Files.writePublic(certificate.pemEncoded + root.pemEncoded, to: intermediatePath, force: force)
            try Files.writePrivate(Array(try key.pemEncoded(passphrase: passphrase).utf8), to: intermediateKeyPath, force: force)
            print("intermediate CA: \(intermediatePath) (\(certificate.subject), SHA-256 \(certificate.sha256FingerprintText))")
        }
    }
}
