import Foundation
@testable import MultipeerCrypto
import MultipeerTestSupport
import Testing

/// Values an app hands the crypto layer through its public API must never trap on a conversion:
/// Swift traps when `time_t(someDouble)` or `Int32(someInt)` does not fit, which kills the process.
/// Each of these crashed before its conversion was checked; now it is an error (or, for a depth,
/// the largest depth OpenSSL takes).
@Suite("Arithmetic audit: out-of-range app values are errors, not traps (MultipeerCrypto)", .serialized)
struct CryptoArithmeticAuditTests {
    /// Seconds since 1970 that no `time_t` holds: infinite, NaN, or beyond Int64 either way.
    static let unrepresentableTimes: [TimeInterval] = [.infinity, -.infinity, .nan, 1e19, -1e19]

    /// Inputs of more than `Int32.max` bytes need several GiB; run those tests only where there is room.
    static let hasRoomForHugeInputs = ProcessInfo.processInfo.physicalMemory >= 16 << 30

    @Test(arguments: [TimeInterval.infinity, 1e19])
    func certificateEndingBeyondTimeTIsAnError(secondsSince1970: TimeInterval) throws {
        let key = try PrivateKey.generate()
        let builder = CertificateBuilder(
            commonName: "far", notValidBefore: Date(), notValidAfter: Date(timeIntervalSince1970: secondsSince1970))
        let error = #expect(throws: SecurityError.self) { try builder.issue(for: key) }
        #expect(error?.code == .invalidArgument)
    }

    @Test(arguments: [-TimeInterval.infinity, -1e19])
    func certificateStartingBeforeTimeTIsAnError(secondsSince1970: TimeInterval) throws {
        let key = try PrivateKey.generate()
        let builder = CertificateBuilder(commonName: "early", notValidBefore: Date(timeIntervalSince1970: secondsSince1970))
        let error = #expect(throws: SecurityError.self) { try builder.issue(for: key) }
        #expect(error?.code == .invalidArgument)
    }

    @Test func ordinaryValidityIsUnchanged() throws {
        let key = try PrivateKey.generate()
        let start = Date(timeIntervalSince1970: 1_700_000_000.75)
        let end = Date(timeIntervalSince1970: 1_800_000_000.25)
        let certificate = try CertificateBuilder(commonName: "plain", notValidBefore: start, notValidAfter: end).issue(for: key)
        // Fractions of a second are cut toward zero, as `time_t(_:)` always did.
        #expect(certificate.notValidBefore == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(certificate.notValidAfter == Date(timeIntervalSince1970: 1_800_000_000))
    }

    @Test(arguments: [Int.max, Int(Int32.max) + 1])
    func depthBeyondInt32IsTheLargestDepth(maximumDepth: Int) throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice")
        #expect(TrustEvaluation(anchors: [pki.root], maximumDepth: maximumDepth).evaluate(alice.certificateChain) == .trusted)
    }

    @Test(arguments: unrepresentableTimes)
    func validationTimeBeyondTimeTIsUntrusted(secondsSince1970: TimeInterval) throws {
        let pki = try TestPKI()
        let alice = try pki.peer("alice")
        let evaluation = TrustEvaluation(anchors: [pki.root], validationTime: Date(timeIntervalSince1970: secondsSince1970))
        guard case .untrusted(let failure) = evaluation.evaluate(alice.certificateChain) else {
            Issue.record("a validation time no time_t holds was trusted")
            return
        }
        #expect(failure.reason == .other)
    }

    @Test(.enabled(if: hasRoomForHugeInputs, "needs about 2 GiB"))
    func readingMoreThanInt32MaxBytesIsAnError() {
        let huge = [UInt8](repeating: UInt8(ascii: "A"), count: Int(Int32.max) + 1)
        let error = #expect(throws: SecurityError.self) { try OpenSSLBIO.withReadBIO(huge) { _ in } }
        #expect(error?.code == .malformedData)
    }

    @Test(.enabled(if: hasRoomForHugeInputs, "needs about 4 GiB"))
    func organizationOfMoreThanInt32MaxBytesIsAnError() throws {
        let key = try PrivateKey.generate()
        let count = Int(Int32.max) + 1
        let organization = String(unsafeUninitializedCapacity: count) { utf8 in
            utf8.initialize(repeating: UInt8(ascii: "o"))
            return count
        }
        let builder = CertificateBuilder(commonName: "big", organization: organization)
        let error = #expect(throws: SecurityError.self) { try builder.issue(for: key) }
        #expect(error?.code == .invalidArgument)
    }
}
