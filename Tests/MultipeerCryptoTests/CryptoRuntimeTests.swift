import Foundation
import CMultipeerOpenSSL
import CMultipeerShims
@testable import MultipeerCrypto
import Testing

@Suite("System crypto libraries and shims")
struct CryptoRuntimeTests {
    @Test func librariesInitialiseAndReportTheirVersions() throws {
        try CryptoRuntime.ensureInitialized()
        #expect(CryptoRuntime.openSSLVersion.hasPrefix("OpenSSL 3."))
        #expect(!CryptoRuntime.sodiumVersion.isEmpty)
        try CryptoRuntime.ensureInitialized()
    }

    /// scripts/test-openssl builds against a second OpenSSL and says which: the tests must then
    /// run against it, headers and library alike, not the system's.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["MP_EXPECTED_OPENSSL"] != nil))
    func theSecondConfigurationRunsAgainstTheOpenSSLItNames() throws {
        let expected = try #require(ProcessInfo.processInfo.environment["MP_EXPECTED_OPENSSL"])
        #expect(CryptoRuntime.openSSLVersion.hasPrefix("OpenSSL \(expected)"), "running against \(CryptoRuntime.openSSLVersion)")
        #expect(OPENSSL_VERSION_TEXT.hasPrefix("OpenSSL \(expected)"), "built with the headers of \(OPENSSL_VERSION_TEXT)")
    }

    @Test func protocolVersionShimsPinTLS13() throws {
        let context = try #require(SSL_CTX_new(TLS_method()))
        defer { SSL_CTX_free(context) }
        #expect(mp_SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION) == 1)
        #expect(mp_SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION) == 1)
        #expect(mp_SSL_CTX_get_min_proto_version(context) == TLS1_3_VERSION)
        #expect(mp_SSL_CTX_get_max_proto_version(context) == TLS1_3_VERSION)
    }

    @Test func certificateStackShims() throws {
        let stack = try #require(mp_sk_X509_new_null())
        defer { mp_sk_X509_pop_free(stack) }
        #expect(mp_sk_X509_num(stack) == 0)
        let certificate = try #require(X509_new())
        #expect(mp_sk_X509_push(stack, certificate) == 1)
        #expect(mp_sk_X509_num(stack) == 1)
        #expect(mp_sk_X509_value(stack, 0) == certificate)
        #expect(mp_sk_X509_value(stack, 1) == nil)
    }

    @Test func memoryBIOShimReturnsWrittenBytes() throws {
        let bio = try #require(BIO_new(BIO_s_mem()))
        defer { BIO_free(bio) }
        #expect(BIO_write(bio, "abc", 3) == 3)
        var data: UnsafeMutablePointer<CChar>?
        #expect(mp_BIO_get_mem_data(bio, &data) == 3)
        #expect(data.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: 3), as: UTF8.self) } == "abc")
    }
}

@Suite("SecureBytes")
struct SecureBytesTests {
    @Test func copiesComparesAndExposesBytes() {
        let key = SecureBytes(copying: [1, 2, 3, 4])
        #expect(key.count == 4)
        #expect(key.withUnsafeBytes { Array($0) } == [1, 2, 3, 4])
        #expect(key.constantTimeEquals(SecureBytes(copying: [1, 2, 3, 4])))
        #expect(!key.constantTimeEquals(SecureBytes(copying: [1, 2, 3, 5])))
        #expect(!key.constantTimeEquals(SecureBytes(copying: [1, 2, 3])))
        #expect(SecureBytes(copying: []).constantTimeEquals(SecureBytes(copying: [])))
    }

    @Test func randomKeysDiffer() throws {
        try CryptoRuntime.ensureInitialized()
        let first = SecureBytes(randomCount: 32)
        let second = SecureBytes(randomCount: 32)
        #expect(first.count == 32)
        #expect(!first.constantTimeEquals(second))
    }

    @Test func initializerThatFailsLeavesNothingBehind() {
        struct Failure: Error {}
        #expect(throws: Failure.self) {
            _ = try SecureBytes(count: 16) { bytes in
                bytes.storeBytes(of: 0xFF, as: UInt8.self)
                throw Failure()
            }
        }
        let filled = SecureBytes(count: 3) { $0.copyBytes(from: [7, 8, 9]) }
        #expect(filled.withUnsafeBytes { Array($0) } == [7, 8, 9])
    }

    @Test func wipeZeroesTheBuffer() {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 8, alignment: 8)
        defer { buffer.deallocate() }
        buffer.copyBytes(from: [UInt8](repeating: 0xAB, count: 8))
        SecureBytes.wipe(buffer)
        #expect(Array(buffer) == [UInt8](repeating: 0, count: 8))
    }
}
