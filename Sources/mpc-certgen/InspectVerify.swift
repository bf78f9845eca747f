import ArgumentParser
import Foundation
import MultipeerCrypto

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show what a certificate file holds: PEM (one or more), DER, or PKCS#12.",
        discussion: "Prints subject, issuer, serial, validity, key type, SHA-256 fingerprint and a short code to compare on two screens. Never prints keys.")

    @Argument(help: "The file to inspect.")
    var file: String

    @OptionGroup var passwords: PasswordOptions

    func run() throws {
        let bytes = try Files.readBytes(file)
        let certificates: [Certificate]
        if let text = String(bytes: bytes, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") {
            certificates = try Certificate.chain(pemEncoded: text)
        } else if let der = try? Certificate(derEncoded: bytes) {
            certificates = [der]
        } else {
            guard let password = try passwords.resolve(required: false) else {
                throw Files.Failure(description: "\(file) is not PEM or DER; if it is PKCS#12, give --password-file")
            }
            certificates = try SecurityIdentity(pkcs12: bytes, password: password).certificateChain
        }
        for (index, certificate) in certificates.enumerated() {
            if index > 0 { print("") }
            print("certificate \(index + 1) of \(certificates.count)")
            print("  subject:     \(certificate.subject)")
            print("  issuer:      \(certificate.issuer)")
            print("  serial:      \(certificate.serialNumberHex)")
            print("  valid from:  \(certificate.notValidBefore)")
            print("  valid until: \(certificate.notValidAfter)\(certificate.notValidAfter < Date() ? "  (EXPIRED)" : certificate.notValidBefore > Date() ? "  (NOT YET VALID)" : "")")
            print("  key:         \(certificate.publicKeyAlgorithm.map { "\($0)" } ?? "unsupported")")
            let ca = certificate.isCertificateAuthority ? "yes" : certificate.isEndEntity ? "no" : "marked CA:TRUE (keyUsage forbids signing)"
            print("  CA:          \(ca)")
            print("  SHA-256:     \(certificate.sha256FingerprintText)")
            print("  code:        \(ComparisonCode.make(for: certificate))")
        }
    }
}

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a certificate chain against trust anchors, as the library's TrustEvaluation does.",
        discussion: "Exits 0 and prints OK when trusted; otherwise prints the reason and exits 1.")

    @Argument(help: "PEM file with the chain, leaf first (for example NAME.pem from identity issue).")
    var chain: String

    @Option(help: "PEM file with the trusted CA certificate(s).")
    var anchors: String

    func run() throws {
        let certificates = try Certificate.chain(pemEncoded: Files.readText(chain))
        let roots = try Certificate.chain(pemEncoded: Files.readText(anchors))
        guard !roots.isEmpty else { throw Files.Failure(description: "\(anchors) holds no certificate") }
        switch TrustEvaluation(anchors: roots).evaluate(certificates) {
        case .trusted:
            print("\(chain): OK (\(certificates.first?.subject ?? ""))")
        case .untrusted(let failure):
            print("\(chain): NOT TRUSTED: \(failure.message) [\(failure.reason)]")
            throw ExitCode.failure
        }
    }
}
