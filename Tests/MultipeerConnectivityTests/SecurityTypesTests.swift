import Foundation
@testable import MultipeerConnectivity
import MultipeerCrypto
import MultipeerTestSupport
import Testing

@Suite("Apple-shaped security identity arrays")
struct SecurityTypesTests {
    static let pki = try! TestPKI()
    static let alice = try! pki.peer("alice")

    @Test func identityWithIntermediatesParses() throws {
        let identity = SecIdentity(try SecurityIdentity(privateKey: Self.alice.privateKey, certificateChain: [Self.alice.certificate]))
        let parsed = try #require(try SecurityIdentityArray.parse([identity, SecCertificate(Self.pki.intermediate)]))
        #expect(parsed.certificateChain == [Self.alice.certificate, Self.pki.intermediate])
        #expect(try SecurityIdentityArray.parse(nil) == nil)
        // An identity alone keeps the chain it was loaded with.
        #expect(try SecurityIdentityArray.parse([SecIdentity(Self.alice)])?.certificateChain == Self.alice.certificateChain)
    }

    @Test func malformedArraysAreInvalidParameterNotACrash() {
        let cases: [[Any]] = [
            [],
            ["not an identity"],
            [SecCertificate(Self.pki.root)],
            [SecIdentity(Self.alice), "not a certificate"],
            [SecIdentity(Self.alice), SecIdentity(Self.alice)],
            [42],
        ]
        for array in cases {
            do {
                _ = try SecurityIdentityArray.parse(array)
                Issue.record("accepted \(array)")
            } catch {
                #expect(error.code == .invalidParameter)
            }
        }
    }

    @Test func appleSecurityFunctionsWork() throws {
        let identity = SecIdentity(Self.alice)
        var certificate: SecCertificate?
        #expect(SecIdentityCopyCertificate(identity, &certificate) == 0)
        let leaf = try #require(certificate)
        #expect(SecCertificateCopySubjectSummary(leaf) == "alice")
        let der = SecCertificateCopyData(leaf)
        #expect(SecCertificateCreateWithData(nil, der) == leaf)
        #expect(SecCertificateCreateWithData(nil, Data([1, 2, 3])) == nil)
        #expect(identity.intermediates == [SecCertificate(Self.pki.intermediate)])
    }

    @Test func pkcs12LoadsIntoASecIdentity() throws {
        let data = Data(try Self.alice.pkcs12(password: "pw"))
        let identity = try SecIdentity(pkcs12: data, password: "pw")
        #expect(identity.certificate == SecCertificate(Self.alice.certificate))
        #expect(throws: MCError.self) { try SecIdentity(pkcs12: data, password: "nope") }
    }
}
