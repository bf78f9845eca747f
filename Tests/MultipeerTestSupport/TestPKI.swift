import Foundation
import MultipeerCrypto

/// A small PKI made with the library's own builder: root -> intermediate -> peers.
public final class TestPKI: Sendable {
    public let rootKey: PrivateKey
    public let root: Certificate
    public let intermediateKey: PrivateKey
    public let intermediate: Certificate

    public init(name: String = "Test", keyAlgorithm: KeyAlgorithm = .ed25519) throws {
        rootKey = try PrivateKey.generate(keyAlgorithm)
        root = try CertificateBuilder(
            commonName: "\(name) Root CA", organization: "swift-multipeer tests",
            notValidBefore: Date(timeIntervalSinceNow: -86_400), notValidAfter: Date(timeIntervalSinceNow: 10 * 365 * 86_400), role: .certificateAuthority(pathLength: 1)
        ).issue(for: rootKey)
        intermediateKey = try PrivateKey.generate(keyAlgorithm)
        intermediate = try CertificateBuilder(
            commonName: "\(name) Intermediate CA", notValidBefore: Date(timeIntervalSinceNow: -86_400),
            role: .certificateAuthority(pathLength: 0)
        ).issue(for: intermediateKey, issuer: (root, rootKey))
    }

    /// A peer identity under the intermediate; `adjust` can make its certificate one that
    /// verifiers must refuse (CertificateBuilder's package-level settings).
    public func peer(
        _ name: String, algorithm: KeyAlgorithm = .ed25519,
        notValidBefore: Date = Date(timeIntervalSinceNow: -300), notValidAfter: Date = Date(timeIntervalSinceNow: 86_400),
        adjust: (inout CertificateBuilder) -> Void = { _ in }
    ) throws -> SecurityIdentity {
        let key = try PrivateKey.generate(algorithm)
        var builder = CertificateBuilder(
            commonName: name, dnsNames: ["\(name).local"], notValidBefore: notValidBefore, notValidAfter: notValidAfter)
        adjust(&builder)
        let certificate = try builder.issue(for: key, issuer: (intermediate, intermediateKey))
        return try SecurityIdentity(privateKey: key, certificateChain: [certificate, intermediate])
    }
}
