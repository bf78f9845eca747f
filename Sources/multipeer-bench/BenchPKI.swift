import ArgumentParser
import Foundation
import MultipeerCrypto

/// The key type of the bench's identities: root and leaves alike.
enum BenchKeyType: String, CaseIterable, ExpressibleByArgument {
    case ed25519
    case p256

    var algorithm: KeyAlgorithm {
        switch self {
        case .ed25519: .ed25519
        case .p256: .ecdsaP256
        }
    }

    init?(_ algorithm: KeyAlgorithm) {
        switch algorithm {
        case .ed25519: self = .ed25519
        case .ecdsaP256: self = .p256
        case .rsa: return nil
        }
    }

    /// As reports name it ("Ed25519", "ECDSA P-256").
    var label: String { algorithm.description }
}

/// Identities for the scenarios, made with the library: a root, and leaves issued straight by it
/// (no intermediate), all of one key type (Ed25519 by default, as the CLI's).
struct BenchPKI {
    let keyType: BenchKeyType
    let root: Certificate
    let a: SecurityIdentity
    let b: SecurityIdentity
    let eight: [SecurityIdentity]

    init(keyType: BenchKeyType = .ed25519) throws {
        let rootKey = try PrivateKey.generate(keyType.algorithm)
        let root = try CertificateBuilder(commonName: "bench CA", role: .certificateAuthority(pathLength: 0)).issue(for: rootKey)
        try self.init(keyType: keyType, root: root, rootKey: rootKey,
                      a: try Self.issue("a", under: (root, rootKey)), b: try Self.issue("b", under: (root, rootKey)))
    }

    private init(keyType: BenchKeyType, root: Certificate, rootKey: PrivateKey, a: SecurityIdentity, b: SecurityIdentity) throws {
        self.keyType = keyType
        self.root = root
        self.a = a
        self.b = b
        eight = try (0..<8).map { try Self.issue("p\($0)", under: (root, rootKey)) }
    }

    /// A leaf of the issuer's key type, issued by it.
    private static func issue(_ name: String, under issuer: (certificate: Certificate, key: PrivateKey)) throws -> SecurityIdentity {
        let key = try PrivateKey.generate(issuer.key.algorithm)
        return try SecurityIdentity(privateKey: key, certificateChain: [try CertificateBuilder(commonName: name).issue(for: key, issuer: issuer)])
    }

    // MARK: Shared with nio-ssl-bench (scripts/bench-establishment)

    /// The files `export(to:)` writes: PEM, keys unencrypted (a benchmark's scratch directory).
    static let files = ["root.pem", "root.key", "a.pem", "a.key", "b.pem", "b.key"]

    /// Writes the root and the a and b identities, so that another program (nio-ssl-bench
    /// --identities) uses the very same certificates and keys. The keys are readable by the
    /// owner only; the root's key is there so that `load` can issue the mesh's eight identities.
    static func export(keyType: BenchKeyType, to directory: String) throws {
        let rootKey = try PrivateKey.generate(keyType.algorithm)
        let root = try CertificateBuilder(commonName: "bench CA", role: .certificateAuthority(pathLength: 0)).issue(for: rootKey)
        let a = try issue("a", under: (root, rootKey))
        let b = try issue("b", under: (root, rootKey))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        func write(_ name: String, _ text: String, secret: Bool) throws {
            let path = "\(directory)/\(name)"
            guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: secret ? 0o600 : 0o644]) else {
                throw ValidationError("cannot write \(path)")
            }
        }
        try write("root.pem", root.pemEncoded, secret: false)
        try write("root.key", try rootKey.pemEncoded(), secret: true)
        for (name, identity) in [("a", a), ("b", b)] {
            try write("\(name).pem", identity.certificateChainPEM, secret: false)
            try write("\(name).key", try identity.privateKey.pemEncoded(), secret: true)
        }
    }

    /// Reads what `export(to:)` wrote; the key type is the root's.
    static func load(from directory: String) throws -> BenchPKI {
        func text(_ name: String) throws -> String {
            do {
                return try String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)
            } catch {
                throw ValidationError("--identities: cannot read \(directory)/\(name) (\(BenchPKI.files.joined(separator: ", ")))")
            }
        }
        let root = try Certificate(pemEncoded: try text("root.pem"))
        let rootKey = try PrivateKey(pemEncoded: try text("root.key"))
        guard rootKey.matches(root), let keyType = BenchKeyType(rootKey.algorithm) else {
            throw ValidationError("--identities: root.key is not an Ed25519 or P-256 key of root.pem")
        }
        func identity(_ name: String) throws -> SecurityIdentity {
            let identity = try SecurityIdentity(certificateChainPEM: try text("\(name).pem"), privateKeyPEM: try text("\(name).key"))
            guard identity.privateKey.algorithm == rootKey.algorithm else {
                throw ValidationError("--identities: \(name) is \(identity.privateKey.algorithm), the root \(rootKey.algorithm)")
            }
            return identity
        }
        return try BenchPKI(keyType: keyType, root: root, rootKey: rootKey, a: try identity("a"), b: try identity("b"))
    }
}
