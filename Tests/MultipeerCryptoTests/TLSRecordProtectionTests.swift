@testable import MultipeerCrypto
import NIOCore
import Testing

@Suite("TLS record protection: sealing from pieces")
struct TLSRecordProtectionTests {
    static let lengths = [0, 1, 64, 1_023, 1_024, 1_025, 1_100, 4_000]

    /// A secret of another suite's hash, or cut short, would key records that no peer opens.
    @Test(arguments: [
        (TLSCipherSuite.aes128GCMSHA256, 48), (.aes128GCMSHA256, 31), (.chacha20Poly1305SHA256, 0),
        (.chacha20Poly1305SHA256, 48), (.aes256GCMSHA384, 32), (.aes256GCMSHA384, 49),
    ])
    func aSecretNotAsLongAsTheSuitesHashIsRefused(suite: TLSCipherSuite, length: Int) throws {
        let wrong = SecureBytes(randomCount: length)
        let right = SecureBytes(randomCount: suite.hashLength)
        let reason = "a TLS traffic secret of \(length) bytes for \(suite), whose hash is \(suite.hashLength) bytes"
        for sealing in [true, false] {
            let error = #expect(throws: SecurityError.self) { try TLSRecordProtection(suite: suite, secret: wrong, sealing: sealing) }
            #expect(error?.code == .invalidArgument && error?.reason == reason)
        }
        // Either secret of the layer, for either role.
        for role in [TLSEngine.Role.client, .server] {
            for (client, server) in [(wrong, right), (right, wrong)] {
                let error = #expect(throws: SecurityError.self) {
                    try TLSRecordLayer(suite: suite, role: role, clientSecret: client, serverSecret: server, recordsPerKeyUpdate: 1 << 24)
                }
                #expect(error?.code == .invalidArgument && error?.reason == reason)
            }
        }
    }

    /// Small content is gathered into the record and encrypted in one call, larger content is
    /// encrypted piece by piece. Forcing each way in turn, at every length and wherever the
    /// content is split, the record must be the same bytes, and open to the same content.
    @Test(arguments: TLSCipherSuite.allCases, lengths)
    func bothWaysOfSealingMakeTheSameRecord(suite: TLSCipherSuite, length: Int) throws {
        let secret = SecureBytes(randomCount: suite.hashLength)
        let content = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        var records: [ByteBuffer] = []
        for gatheringLimit in [0, Int.max] {
            for split in Set([0, 1, length / 2, max(0, length - 1), length]) where split <= length {
                // A new writer each time, so every record is sealed at sequence number 0.
                let writer = try TLSRecordProtection(suite: suite, secret: secret, sealing: true, gatheringLimit: gatheringLimit)
                var record = ByteBuffer()
                try content[..<split].withUnsafeBytes { head in
                    try content[split...].withUnsafeBytes { rest in
                        try writer.seal(contentType: 23, head, rest, into: &record)
                    }
                }
                records.append(record)
            }
        }
        let first = try #require(records.first)
        #expect(first.readableBytes == TLSRecordProtection.headerLength + length + 1 + TLSRecordProtection.tagLength)
        #expect(records.allSatisfy { $0 == first }, "\(suite), \(length) bytes")

        let opener = try TLSRecordProtection(suite: suite, secret: secret, sealing: false)
        var plaintext = [UInt8](repeating: 0, count: length + 1)
        let inner = first.withUnsafeReadableBytes { raw in
            plaintext.withUnsafeMutableBytes { opener.open(raw, into: $0.baseAddress!) }
        }
        #expect(inner == length + 1)
        #expect(Array(plaintext[..<length]) == content)
        #expect(plaintext[length] == 23)
    }
}
