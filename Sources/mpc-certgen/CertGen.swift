import ArgumentParser

@main
struct CertGen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mpc-certgen",
        abstract: "Makes and checks the X.509 identities swift-multipeer sessions authenticate with.",
        discussion: """
            A typical setup: one CA, then one identity per device.

              mpc-certgen ca create --name "Home CA" --out ca
              mpc-certgen identity issue --name alice --ca ca/ca.pem --ca-key ca/ca.key --out alice --password-file pw.txt
              mpc-certgen inspect alice/alice.p12 --password-file pw.txt
              mpc-certgen verify alice/alice.pem --anchors ca/ca.pem

            Private keys are written with mode 0600 and never printed. Existing files are never overwritten unless --force is given. See docs/certificates.md.
            """,
        subcommands: [CA.self, Identity.self, Inspect.self, Verify.self]
    )
}

struct CA: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca", abstract: "Certificate authorities.", subcommands: [CACreate.self])
}

struct Identity: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "identity", abstract: "Peer identities (key + certificate chain).",
        subcommands: [IdentityIssue.self, IdentitySelfSigned.self])
}
