import Foundation
import MultipeerCrypto
import MultipeerProtocol

// Linux counterparts of Apple's Security types, so that the array Apple's
// `MCSession(peer:securityIdentity:encryptionPreference:)` takes is written the same way:
// `[identity, intermediate1, intermediate2, ...]`.

/// A private key with its certificate (Apple's `SecIdentity`).
public final class SecIdentity: Hashable, @unchecked Sendable {
    // @unchecked: wraps an immutable SecurityIdentity.
    public let identity: SecurityIdentity

    public init(_ identity: SecurityIdentity) { self.identity = identity }

    /// Opens a password-protected PKCS#12 file; its extra certificates become the chain.
    public convenience init(pkcs12 data: Data, password: String) throws(MCError) {
        do {
            self.init(try SecurityIdentity(pkcs12: [UInt8](data), password: password))
        } catch {
            throw MCError(.invalidParameter, reason: error.description)
        }
    }

    public var certificate: SecCertificate { SecCertificate(identity.certificate) }

    /// The intermediates the identity was loaded with, as Apple's array expects after the identity.
    public var intermediates: [SecCertificate] { identity.certificateChain.dropFirst().map(SecCertificate.init) }

    public static func == (lhs: SecIdentity, rhs: SecIdentity) -> Bool { lhs.identity.certificate == rhs.identity.certificate }
    public func hash(into hasher: inout Hasher) { hasher.combine(identity.certificate) }
}

/// An X.509 certificate (Apple's `SecCertificate`).
public final class SecCertificate: Hashable, @unchecked Sendable, CustomStringConvertible {
    // @unchecked: wraps an immutable Certificate.
    public let certificate: Certificate

    public init(_ certificate: Certificate) { self.certificate = certificate }

    public static func == (lhs: SecCertificate, rhs: SecCertificate) -> Bool { lhs.certificate == rhs.certificate }
    public func hash(into hasher: inout Hasher) { hasher.combine(certificate) }
    public var description: String { certificate.description }
}

/// Apple's `SecCertificateCreateWithData`: DER in, nil if it is not a certificate.
public func SecCertificateCreateWithData(_ allocator: Any?, _ data: Data) -> SecCertificate? {
    (try? Certificate(derEncoded: [UInt8](data))).map(SecCertificate.init)
}

/// Apple's `SecCertificateCopyData`: the DER encoding.
public func SecCertificateCopyData(_ certificate: SecCertificate) -> Data {
    Data(certificate.certificate.derEncoded)
}

/// Apple's `SecCertificateCopySubjectSummary`: the common name, or the whole subject when
/// there is none or more than one.
public func SecCertificateCopySubjectSummary(_ certificate: SecCertificate) -> String? {
    certificate.certificate.subjectCommonName ?? certificate.certificate.subject
}

/// Apple's `SecIdentityCopyCertificate`; returns 0 (errSecSuccess).
@discardableResult
public func SecIdentityCopyCertificate(_ identity: SecIdentity, _ certificateRef: inout SecCertificate?) -> Int32 {
    certificateRef = identity.certificate
    return 0
}

enum SecurityIdentityArray {
    /// Checks Apple's `[identity, certificates...]` shape and returns the identity with its chain.
    /// The certificates after the identity replace any the identity was loaded with.
    static func parse(_ array: [Any]?) throws(MCError) -> SecurityIdentity? {
        guard let array else { return nil }
        guard let first = array.first else {
            throw MCError(.invalidParameter, reason: "securityIdentity is empty; pass nil for no identity")
        }
        guard let secIdentity = first as? SecIdentity else {
            throw MCError(.invalidParameter, reason: "securityIdentity[0] must be a SecIdentity, found \(type(of: first))")
        }
        var intermediates: [Certificate] = []
        for (index, element) in array.dropFirst().enumerated() {
            guard let certificate = element as? SecCertificate else {
                throw MCError(.invalidParameter, reason: "securityIdentity[\(index + 1)] must be a SecCertificate, found \(type(of: element))")
            }
            intermediates.append(certificate.certificate)
        }
        guard !intermediates.isEmpty else { return secIdentity.identity }
        do {
            return try SecurityIdentity(
                privateKey: secIdentity.identity.privateKey, certificateChain: [secIdentity.identity.certificate] + intermediates)
        } catch {
            throw MCError(.invalidParameter, reason: error.description)
        }
    }
}

/// What the application decides on before a peer can connect (the Swift-native trust question).
public struct MCTrustRequest: Sendable {
    public let peer: MCPeerID
    /// Leaf first; nil when the peer has no identity.
    public let certificates: [SecCertificate]?
    /// The 6-digit pairing code of this connection (docs/PROTOCOL.md §7.3). Show it; the person
    /// on the other side sees the same digits unless someone sits in between.
    public let pairingCode: String
    /// Whether the connection is TLS. In plaintext (both sides chose `.none`, or `.optional`
    /// with `.none`) the code binds no keys: someone relaying the connection sees it too, so
    /// matching codes prove nothing.
    public let isEncrypted: Bool
}
