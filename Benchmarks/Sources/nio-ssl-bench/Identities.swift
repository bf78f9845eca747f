import Foundation
import NIOSSL

/// The repository's test PKI (Certificates/README.md): alice (Ed25519) serves, bob (ECDSA P-256)
/// connects, both chains run through the intermediate to the root, which each side trusts alone.
struct Identities {
    let server: NIOSSLContext
    let client: NIOSSLContext

    /// `applicationProtocols` and `curves` only for the TLS peer (TLSPeer); nil curves keep
    /// swift-nio-ssl's default groups.
    init(directory: String, applicationProtocols: [String] = [], curves: [NIOTLSCurve]? = nil) throws {
        let password = try String(contentsOfFile: "\(directory)/password.txt", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let root = try NIOSSLCertificate.fromPEMFile("\(directory)/ca/ca.pem")
        func configuration(_ name: String, server: Bool) throws -> TLSConfiguration {
            let chain = try NIOSSLCertificate.fromPEMFile("\(directory)/peers/\(name).pem").map(NIOSSLCertificateSource.certificate)
            let key = try NIOSSLPrivateKey(file: "\(directory)/peers/\(name).key", format: .pem) { (setPassword: NIOSSLPassphraseSetter<[UInt8]>) in
                setPassword(Array(password.utf8))
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
            // BoringSSL leaves Ed25519 out of its default verification list; alice signs with it.
            tls.verifySignatureAlgorithms = [.ed25519, .ecdsaSecp256R1Sha256, .ecdsaSecp384R1Sha384, .rsaPssRsaeSha256]
            tls.applicationProtocols = applicationProtocols
            tls.curves = curves
            return tls
        }
        server = try NIOSSLContext(configuration: configuration("alice", server: true))
        client = try NIOSSLContext(configuration: configuration("bob", server: false))
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
