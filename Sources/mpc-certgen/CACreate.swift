import ArgumentParser
import Foundation
import MultipeerCrypto

struct CACreate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a root CA, optionally with an intermediate CA signed by it.",
        discussion: """
            Writes OUT/ca.pem and OUT/ca.key, and with --intermediate also OUT/intermediate.pem (the intermediate followed by the root) and OUT/intermediate.key. Keys are encrypted when a password is given. Issue peers from the intermediate and keep the root key offline.
            """)

    @Option(help: "Common name of the root CA.")
    var name: String

    @OptionGroup var output: OutputOptions

    @Option(help: "Also create an intermediate CA with this common name.")
    var intermediate: String?

    @OptionGroup var validity: ValidityOptions
    @OptionGroup var passwords: PasswordOptions

    func run() throws {
        let (start, end) = try validity.window()
        let passphrase = try passwords.resolve(required: false)
        try Files.makeDirectory(output.out)
        let rootPath = Files.join(output.out, "ca.pem")
        let rootKeyPath = Files.join(output.out, "ca.key")
        let intermediatePath = Files.join(output.out, "intermediate.pem")
        let intermediateKeyPath = Files.join(output.out, "intermediate.key")
        try Files.checkWritable([rootPath, rootKeyPath] + (intermediate == nil ? [] : [intermediatePath, intermediateKeyPath]), force: output.force)

        let rootKey = try PrivateKey.generate(output.keyType.algorithm)
        let root = try CertificateBuilder(
            commonName: name, notValidBefore: start, notValidAfter: end,
            role: .certificateAuthority(pathLength: intermediate == nil ? 0 : 1)
        ).issue(for: rootKey)
        try Files.writePublic(root.pemEncoded, to: rootPath, force: output.force)
        try Files.writePrivate(Array(try rootKey.pemEncoded(passphrase: passphrase).utf8), to: rootKeyPath, force: output.force)
        print("root CA:         \(rootPath) (\(root.subject), \(output.keyType.algorithm), SHA-256 \(root.sha256FingerprintText))")

        if let intermediate {
            let key = try PrivateKey.generate(output.keyType.algorithm)
            let certificate = try CertificateBuilder(
                commonName: intermediate, notValidBefore: start, notValidAfter: end, role: .certificateAuthority(pathLength: 0)
            ).issue(for: key, issuer: (root, rootKey))
            try Files.writePublic(certificate.pemEncoded + root.pemEncoded, to: intermediatePath, force: output.force)
            try Files.writePrivate(Array(try key.pemEncoded(passphrase: passphrase).utf8), to: intermediateKeyPath, force: output.force)
            print("intermediate CA: \(intermediatePath) (\(certificate.subject), SHA-256 \(certificate.sha256FingerprintText))")
        }
    }
}
