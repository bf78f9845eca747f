import Foundation
import NIOSSL

/// The two TLS contexts of a run, server and client, each trusting one root alone and verifying
/// the other's chain to it. From the repository's test PKI (Certificates/README.md: alice,
/// Ed25519, serves; bob, ECDSA P-256, connects; both chains through the intermediate), or from
/// the files `multipeer-bench --export-identities` writes (a serves, b connects, leaves issued
/// by the root itself), so that both benchmarks use the very same certificates and keys.
struct Identities {
    let server: NIOSSLContext
    let client: NIOSSLContext
    /// What the report says about them.
    let description: String

    /// One side's files: the chain (leaf first), its key, and the password of an encrypted key.
    struct Files {
        let chain: String
        let key: String
        let password: String?
    }

    /// `applicationProtocols` only for the TLS peer (TLSPeer); nil curves keep swift-nio-ssl's
    /// default groups.
    init(root: String, server serverFiles: Files, client clientFiles: Files, description: String,
         applicationProtocols: [String] = [], curves: [NIOTLSCurve]? = nil) throws {
        let root = try NIOSSLCertificate.fromPEMFile(root)
        func configuration(_ files: Files, server: Bool) throws -> TLSConfiguration {
            let chain = try NIOSSLCertificate.fromPEMFile(files.chain).map(NIOSSLCertificateSource.certificate)
            let key: NIOSSLPrivateKey
            if let password = files.password {
                key = try NIOSSLPrivateKey(file: files.key, format: .pem) { (setPassword: NIOSSLPassphraseSetter<[UInt8]>) in
                    setPassword(Array(password.utf8))
                }
            } else {
                key = try NIOSSLPrivateKey(file: files.key, format: .pem)
            }
            var tls = server
                ? TLSConfiguration.makeServerConfigurationWithMTLS(certificateChain: chain, privateKey: .privateKey(key), trustRoots: .certificates(root))
                : TLSConfiguration.makeClientConfiguration()
            tls.certificateChain = chain
            tls.privateKey = .privateKey(key)
            tls.trustRoots = .certificates(root)
            tls.minimumTLSVersion = .tlsv13
            tls.maximumTLSVersion = .tlsv13
            // Verify the chain, not a host name: the peers are named by their certificates.
            tls.certificateVerification = .noHostnameVerification
            // BoringSSL leaves Ed25519 out of its default verification list; Ed25519 identities sign with it.
            tls.verifySignatureAlgorithms = [.ed25519, .ecdsaSecp256R1Sha256, .ecdsaSecp384R1Sha384, .rsaPssRsaeSha256]
            tls.applicationProtocols = applicationProtocols
            tls.curves = curves
            return tls
        }
        server = try NIOSSLContext(configuration: configuration(serverFiles, server: true))
        client = try NIOSSLContext(configuration: configuration(clientFiles, server: false))
        self.description = description
    }

    /// The test PKI in `directory` (Certificates/).
    static func testPKI(_ directory: String, applicationProtocols: [String] = [], curves: [NIOTLSCurve]? = nil) throws -> Identities {
        let password = try String(contentsOfFile: "\(directory)/password.txt", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        func peer(_ name: String) -> Files { Files(chain: "\(directory)/peers/\(name).pem", key: "\(directory)/peers/\(name).key", password: password) }
        return try Identities(root: "\(directory)/ca/ca.pem", server: peer("alice"), client: peer("bob"),
                              description: "test PKI: alice (Ed25519) serves, bob (P-256) connects, through an intermediate",
                              applicationProtocols: applicationProtocols, curves: curves)
    }

    /// What `multipeer-bench --export-identities` wrote to `directory`: root.pem, a.pem/a.key
    /// (the server), b.pem/b.key (the client), keys unencrypted.
    static func exported(_ directory: String, applicationProtocols: [String] = [], curves: [NIOTLSCurve]? = nil) throws -> Identities {
        for name in ["root.pem", "a.pem", "a.key", "b.pem", "b.key"] where !FileManager.default.fileExists(atPath: "\(directory)/\(name)") {
            throw UsageError("--identities: no \(name) in \(directory) (multipeer-bench --export-identities writes them)")
        }
        func peer(_ name: String) -> Files { Files(chain: "\(directory)/\(name).pem", key: "\(directory)/\(name).key", password: nil) }
        return try Identities(root: "\(directory)/root.pem", server: peer("a"), client: peer("b"),
                              description: "multipeer-bench's identities from \(directory): a serves, b connects",
                              applicationProtocols: applicationProtocols, curves: curves)
    }

    /// The test PKI, or the exported identities when `options.identities` names them.
    static func load(_ options: Options, applicationProtocols: [String] = []) throws -> Identities {
        let curves = try TLSPeer.curves(options.curves)
        if let directory = options.identities {
            return try exported(directory, applicationProtocols: applicationProtocols, curves: curves)
        }
        return try testPKI(try locate(options.certificates), applicationProtocols: applicationProtocols, curves: curves)
    }

    /// Certificates/ under the working directory or its parent (run from the root or Benchmarks/).
    static func locate(_ given: String?) throws -> String {
        let candidates = given.map { [$0] } ?? ["Certificates", "../Certificates"]
        for candidate in candidates where FileManager.default.fileExists(atPath: "\(candidate)/password.txt") {
            return candidate
        }
        throw UsageError("no test certificates at \(candidates.joined(separator: " or ")); pass --certificates DIR")
    }
}
