import ArgumentParser
import Foundation
import MultipeerCrypto

enum KeyType: String, ExpressibleByArgument, CaseIterable {
    case ed25519
    case p256
    case rsa3072

    var algorithm: KeyAlgorithm {
        switch self {
        case .ed25519: .ed25519
        case .p256: .ecdsaP256
        case .rsa3072: .rsa(bits: 3072)
        }
    }
}

/// Where to write, what key to make, and whether existing files may be replaced.
struct OutputOptions: ParsableArguments {
    @Option(help: "Directory to write the files to (created if missing).")
    var out: String

    @Option(help: "Type of the new private key.")
    var keyType: KeyType = .ed25519

    @Flag(help: "Overwrite existing files.")
    var force = false
}

struct ValidityOptions: ParsableArguments {
    @Option(help: "Days the certificate is valid for, from --not-before.")
    var days: Int = 365

    @Option(help: "Start of validity as YYYY-MM-DD (UTC). Default: now, less five minutes for clock skew.")
    var notBefore: String?

    @Flag(help: "Allow a validity that has already ended (only for making test fixtures).")
    var allowPastValidity = false

    func window() throws -> (Date, Date) {
        guard days > 0, days <= 36_500 else { throw ValidationError("--days must be between 1 and 36500") }
        let start: Date
        if let notBefore {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withFullDate]
            guard let parsed = formatter.date(from: notBefore) else { throw ValidationError("--not-before must be YYYY-MM-DD") }
            start = parsed
        } else {
            start = Date(timeIntervalSinceNow: -300)
        }
        let end = start.addingTimeInterval(TimeInterval(days) * 86_400)
        guard end > Date() || allowPastValidity else {
            throw ValidationError("the validity would already have ended on \(end); refusing (see --allow-past-validity)")
        }
        return (start, end)
    }
}

struct PasswordOptions: ParsableArguments {
    @Option(help: "Password for the PKCS#12 file and the PEM key (visible to other local users in the process list; prefer --password-file).")
    var password: String?

    @Option(help: "File whose first line is the password.")
    var passwordFile: String?

    func resolve(required: Bool) throws -> String? {
        if password != nil && passwordFile != nil { throw ValidationError("give --password or --password-file, not both") }
        if let password {
            guard !password.isEmpty else { throw ValidationError("the password is empty") }
            return password
        }
        if let passwordFile { return try Self.firstLine(of: passwordFile) }
        if required { throw ValidationError("a password is required: --password-file FILE or --password VALUE") }
        return nil
    }

    static func firstLine(of path: String) throws -> String {
        let text = try Files.readText(path)
        let line = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        guard !line.isEmpty else { throw ValidationError("\(path) holds no password") }
        return line
    }
}
