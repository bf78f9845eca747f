import Dispatch
import Foundation
import MultipeerCrypto

// The parts of Apple's Security framework that map cleanly onto this library: PKCS#12 import
// (over SecurityIdentity) and trust evaluation against the app's anchors (over
// TrustEvaluation). The rest, and why, is in the porting article's table.

// MARK: Core Foundation names

// Apple's Security functions take and return Core Foundation types, which Swift bridges to
// Foundation's. Swift on Linux has no Core Foundation, so these name the Foundation classes
// that Apple's code already converts to and from with `as` (`data as CFData`,
// `items as? [[String: Any]]`, `error as NSError?`).
public typealias CFTypeRef = AnyObject
public typealias CFArray = NSArray
public typealias CFDictionary = NSDictionary
public typealias CFData = NSData
public typealias CFDate = NSDate
public typealias CFString = NSString
public typealias CFError = NSError

/// Apple's status code type; `errSecSuccess` is 0.
public typealias OSStatus = Int32

public let errSecSuccess: OSStatus = 0
public let errSecUnimplemented: OSStatus = -4
public let errSecParam: OSStatus = -50
/// A PKCS#12 password that does not open the container.
public let errSecAuthFailed: OSStatus = -25293
public let errSecCreateChainFailed: OSStatus = -25318
/// Data that is not a PKCS#12 container.
public let errSecDecode: OSStatus = -26275
public let errSecCertificateExpired: OSStatus = -67818
public let errSecCertificateNotValidYet: OSStatus = -67819
public let errSecNotTrusted: OSStatus = -67843

// MARK: PKCS#12

/// The options key for the PKCS#12 password.
public var kSecImportExportPassphrase: CFString { "passphrase" }
/// Result keys: the `SecIdentity`, its chain (`[SecCertificate]`, leaf first), a `SecTrust` over
/// that chain with the basic X.509 policy and no anchors yet, and the leaf's subject summary.
public var kSecImportItemIdentity: CFString { "identity" }
public var kSecImportItemCertChain: CFString { "chain" }
public var kSecImportItemTrust: CFString { "trust" }
public var kSecImportItemLabel: CFString { "label" }

/// Apple's `SecPKCS12Import`: opens a password-protected PKCS#12 container into one result
/// dictionary (the keys above). Returns `errSecSuccess`, `errSecAuthFailed` for a wrong
/// password, `errSecDecode` for anything that is not a container with a key and its
/// certificate, or `errSecParam` without a password. Nothing goes into a keychain (there is
/// none); Apple's `kSecImportItemKeyID` is not given.
public func SecPKCS12Import(_ pkcs12Data: CFData, _ options: CFDictionary, _ items: UnsafeMutablePointer<CFArray?>) -> OSStatus {
    let password = options[kSecImportExportPassphrase as String] ?? options[kSecImportExportPassphrase]
    guard let password = (password as? String) ?? (password as? NSString).map({ String($0) }) else { return errSecParam }
    let identity: SecurityIdentity
    do {
        identity = try SecurityIdentity(pkcs12: [UInt8](Data(referencing: pkcs12Data)), password: password)
    } catch {
        return error.code == .wrongPassword ? errSecAuthFailed : errSecDecode
    }
    let secIdentity = SecIdentity(identity)
    let chain = identity.certificateChain.map(SecCertificate.init)
    let item: [String: AnyObject] = [
        kSecImportItemIdentity as String: secIdentity,
        kSecImportItemCertChain as String: chain as NSArray,
        kSecImportItemTrust as String: SecTrust(certificates: chain, policies: [SecPolicyCreateBasicX509()]),
        kSecImportItemLabel as String: (SecCertificateCopySubjectSummary(secIdentity.certificate) ?? "") as NSString,
    ]
    items.pointee = [item as NSDictionary] as NSArray
    return errSecSuccess
}

// MARK: Certificates

/// Apple's `SecCertificateCreateWithData` for Foundation's `NSData` (`data as CFData`).
public func SecCertificateCreateWithData(_ allocator: Any?, _ data: CFData) -> SecCertificate? {
    SecCertificateCreateWithData(allocator, Data(referencing: data))
}

/// Apple's `SecCertificateCopyCommonName`: the subject's common name, or `errSecParam` when the
/// certificate has none, or several (no single name to compare with a peer's).
@discardableResult
public func SecCertificateCopyCommonName(_ certificate: SecCertificate, _ commonName: UnsafeMutablePointer<CFString?>) -> OSStatus {
    guard let name = certificate.certificate.subjectCommonName else { return errSecParam }
    commonName.pointee = name as NSString
    return errSecSuccess
}

// MARK: Trust

/// What a chain is evaluated for (Apple's `SecPolicy`). Only the basic X.509 policy exists:
/// peers are not named by host names, and every peer certificate is checked for TLS use.
public final class SecPolicy: Hashable, @unchecked Sendable {
    // @unchecked: no state.
    init() {}

    public static func == (lhs: SecPolicy, rhs: SecPolicy) -> Bool { true }
    public func hash(into hasher: inout Hasher) {}
}

/// Apple's `SecPolicyCreateBasicX509`: a chain to one of the anchors, each certificate within
/// its validity, signatures, CA constraints and key strengths checked (OpenSSL's verifier, as
/// `mpc-certgen verify` runs it); the leaf must be an end entity with at most one common name.
public func SecPolicyCreateBasicX509() -> SecPolicy { SecPolicy() }

/// A certificate chain to evaluate, with its anchors and time (Apple's `SecTrust`). Only the
/// anchors set with `SecTrustSetAnchorCertificates` are trusted: the system's roots are never
/// consulted, as a peer's identity comes from the app's own PKI, not from the web's.
public final class SecTrust: @unchecked Sendable {
    // @unchecked: the settings are behind the lock; the certificates never change.
    let certificates: [SecCertificate]
    let policies: [SecPolicy]
    private let lock = NSLock()
    private var anchors: [SecCertificate] = []
    private var verifyDate: Date?

    init(certificates: [SecCertificate], policies: [SecPolicy]) {
        self.certificates = certificates
        self.policies = policies
    }

    func setAnchors(_ anchors: [SecCertificate]) { lock.withLock { self.anchors = anchors } }
    func setVerifyDate(_ date: Date) { lock.withLock { verifyDate = date } }

    /// nil when trusted; otherwise Apple's status for the failure and a description.
    func evaluate() -> (status: OSStatus, reason: String)? {
        let (anchors, date) = lock.withLock { (self.anchors, verifyDate) }
        let evaluation = TrustEvaluation(anchors: anchors.map(\.certificate), validationTime: date)
        guard case .untrusted(let failure) = evaluation.evaluate(certificates.map(\.certificate)) else { return nil }
        let status: OSStatus =
            switch failure.reason {
            case .expired: errSecCertificateExpired
            case .notYetValid: errSecCertificateNotValidYet
            default: errSecNotTrusted
            }
        let subject = certificates.first.flatMap(SecCertificateCopySubjectSummary) ?? "the"
        return (status, "\"\(subject)\" certificate is not trusted: \(failure.description)")
    }
}

/// Apple's `SecTrustCreateWithCertificates`: `certificates` is one `SecCertificate` or an
/// array of them, leaf first; `policies` one `SecPolicy`, an array, or nil (basic X.509).
/// `errSecParam` when they are something else.
public func SecTrustCreateWithCertificates(
    _ certificates: CFTypeRef, _ policies: CFTypeRef?, _ trust: UnsafeMutablePointer<SecTrust?>
) -> OSStatus {
    guard let chain = objects(certificates, of: SecCertificate.self), !chain.isEmpty else { return errSecParam }
    let rules = policies.map { objects($0, of: SecPolicy.self) } ?? [SecPolicyCreateBasicX509()]
    guard let rules else { return errSecParam }
    trust.pointee = SecTrust(certificates: chain, policies: rules)
    return errSecSuccess
}

/// Apple's `SecTrustSetAnchorCertificates`: the certificates the chain must lead to.
@discardableResult
public func SecTrustSetAnchorCertificates(_ trust: SecTrust, _ anchorCertificates: CFArray) -> OSStatus {
    guard let anchors = objects(anchorCertificates, of: SecCertificate.self) else { return errSecParam }
    trust.setAnchors(anchors)
    return errSecSuccess
}

/// Apple's `SecTrustSetAnchorCertificatesOnly`. Accepted either way: only the anchors set are
/// ever trusted here (there are no system roots to add).
@discardableResult
public func SecTrustSetAnchorCertificatesOnly(_ trust: SecTrust, _ anchorCertificatesOnly: Bool) -> OSStatus {
    errSecSuccess
}

/// Apple's `SecTrustSetVerifyDate`: the time validity is checked at, instead of now.
@discardableResult
public func SecTrustSetVerifyDate(_ trust: SecTrust, _ verifyDate: CFDate) -> OSStatus {
    trust.setVerifyDate(verifyDate as Date)
    return errSecSuccess
}

/// Apple's `SecTrustEvaluateWithError`: true when the chain leads to an anchor and passes the
/// policy. Otherwise false, and `error` (when given) gets an `NSError` in
/// `NSOSStatusErrorDomain` whose code is `errSecCertificateExpired`,
/// `errSecCertificateNotValidYet` or `errSecNotTrusted`, with the reason in its description.
public func SecTrustEvaluateWithError(_ trust: SecTrust, _ error: UnsafeMutablePointer<CFError?>?) -> Bool {
    guard let failure = trust.evaluate() else {
        error?.pointee = nil
        return true
    }
    error?.pointee = NSError(
        domain: NSOSStatusErrorDomain, code: Int(failure.status), userInfo: [NSLocalizedDescriptionKey: failure.reason])
    return false
}

/// Apple's callback type for `SecTrustEvaluateAsyncWithError`.
public typealias SecTrustWithErrorCallback = (_ trust: SecTrust, _ result: Bool, _ error: CFError?) -> Void

/// Apple's `SecTrustEvaluateAsyncWithError`: evaluates, then calls `result` on `queue`.
@discardableResult
public func SecTrustEvaluateAsyncWithError(_ trust: SecTrust, _ queue: DispatchQueue, _ result: @escaping SecTrustWithErrorCallback) -> OSStatus {
    // Unchecked: Apple's callback is not Sendable; it runs on the queue the caller chose.
    let callback = UncheckedBox(result)
    queue.async {
        var error: CFError?
        let trusted = SecTrustEvaluateWithError(trust, &error)
        callback.value(trust, trusted, error)
    }
    return errSecSuccess
}

/// The objects of type `T` in a single object or an array of them; nil if any is another type.
private func objects<T: AnyObject>(_ value: CFTypeRef, of type: T.Type) -> [T]? {
    if let single = value as? T { return [single] }
    guard let array = value as? NSArray else { return nil }
    var result: [T] = []
    for element in array {
        guard let object = element as? T else { return nil }
        result.append(object)
    }
    return result
}
