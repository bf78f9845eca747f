import MultipeerCrypto
import MultipeerWire
import Testing

@testable import MultipeerProtocol

/// §7.8: a resource is stored only when every offered byte arrived and hashes to the digest of
/// RESOURCE_COMPLETE; anything else is answered RESOURCE_CANCEL 2.
@Suite("Resource verdict")
struct ResourceVerdictTests {
    static let content: [UInt8] = Array(0..<200)
    static let digest = try! SHA256Digest(bytes: SHA256Hasher.digest(content))

    @Test func aWholeMatchingResourceIsReceived() {
        #expect(ResourceVerdict.length(received: 200, offered: 200) == nil)
        #expect(ResourceVerdict.digest(computed: SHA256Hasher.digest(Self.content), expected: Self.digest) == nil)
        #expect(ResourceVerdict.answer(on: 3, failure: nil) == .resourceReceived(channel: 3))
    }

    @Test(arguments: [0 as UInt64, 199, 201, .max])
    func aWrongLengthIsAnIntegrityFailure(received: UInt64) {
        let failure = ResourceVerdict.length(received: received, offered: 200)
        #expect(failure?.code == .integrityFailure)
        #expect(ResourceVerdict.answer(on: 3, failure: failure) == .resourceCancel(channel: 3, reason: .integrityFailure))
    }

    @Test func aDigestOffByOneBitIsAnIntegrityFailure() {
        var computed = SHA256Hasher.digest(Self.content)
        computed[31] ^= 1
        #expect(ResourceVerdict.digest(computed: computed, expected: Self.digest)?.code == .integrityFailure)
        #expect(ResourceVerdict.digest(computed: [], expected: Self.digest)?.code == .integrityFailure)
    }
}
