@testable import MultipeerCrypto
import NIOCore
import Testing

@Suite("TLS record protection: sealing from pieces")
struct TLSRecordProtectionTests {
    /// Small content is gathered into the record and encrypted in one call, larger content is
    /// encrypted piece by piece: either way, and wherever the content is split, the record must
    /// be the same bytes, and open to the same content.
    @Test(arguments: [0, 1, 64, 1_023, 1_024, 1_025, 1_100, 4_000])
    func aRecordIsTheSameHoweverItsContentIsSplit(length: Int) throws {
        let suite = TLSCipherSuite.aes128GCMSHA256
        let secret = SecureBytes(randomCount: suite.hashLength)
        let content = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let opener = try TLSRecordProtection(suite: suite, secret: secret, sealing: false)
        var whole: ByteBuffer?
        for split in Set([0, 1, length / 2, max(0, length - 1), length]) where split <= length {
            // A new writer each time, so every record is sealed at sequence number 0.
            let writer = try TLSRecordProtection(suite: suite, secret: secret, sealing: true)
            var record = ByteBuffer()
            try content[..<split].withUnsafeBytes { head in
                try content[split...].withUnsafeBytes { rest in
                    try writer.seal(contentType: 23, head, rest, into: &record)
                }
            }
            #expect(record.readableBytes == TLSRecordProtection.headerLength + length + 1 + TLSRecordProtection.tagLength)
            if let whole {
                #expect(record == whole, "split at \(split) of \(length)")
            } else {
                whole = record
            }
        }
        let record = try #require(whole)
        var plaintext = [UInt8](repeating: 0, count: length + 1)
        let inner = record.withUnsafeReadableBytes { raw in
            plaintext.withUnsafeMutableBytes { opener.open(raw, into: $0.baseAddress!) }
        }
        #expect(inner == length + 1)
        #expect(Array(plaintext[..<length]) == content)
        #expect(plaintext[length] == 23)
    }
}
