import Foundation
import MultipeerCrypto
import NIOCore

/// The cipher's own cost: AES-128-GCM sealing and opening of 16 KiB records through the record
/// layer's own code (`TLSRecordProtection`, the same EVP calls per record), on one thread, timed
/// with that thread's CPU clock. What the encrypted bulk path may cost beyond plaintext.
///
/// Like the library's, each pass reads and writes 1 MiB of memory (a message sealed into
/// records, records opened into a message's worth of payload), not one record's buffer in L1.
enum CipherCost {
    static let recordContent = TLSEngine.maximumRecordPlaintext
    static let recordsPerPass = (1 << 20) / recordContent

    /// Microseconds of CPU time per MiB of content sealed and opened, over `bytes` each.
    static func measure(bytes: Int) throws -> (seal: Double, open: Double) {
        let suite = TLSCipherSuite.aes128GCMSHA256
        let secret = SecureBytes(randomCount: suite.hashLength)
        let passes = max(1, bytes / (recordsPerPass * recordContent))
        let content = (0..<(recordsPerPass * recordContent)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var records = ByteBufferAllocator().buffer(capacity: recordsPerPass * (recordContent + 22))

        var sealing: UInt64 = 0
        for _ in 0..<passes {
            // A fresh writer each pass, so every pass's records have sequence numbers 0...
            let sealer = try TLSRecordProtection(suite: suite, secret: secret, sealing: true)
            records.clear()
            let start = threadCPUNanoseconds()
            try content.withUnsafeBytes { content in
                for index in 0..<recordsPerPass {
                    let record = UnsafeRawBufferPointer(rebasing: content[(index * recordContent)..<((index + 1) * recordContent)])
                    try sealer.seal(contentType: 23, record, into: &records)
                }
            }
            sealing += threadCPUNanoseconds() - start
        }

        // The last pass's records, opened by a fresh reader each pass.
        var opening: UInt64 = 0
        // Room for each record's content and type byte.
        let slot = recordContent + 1
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: recordsPerPass * slot, alignment: 16)
        defer { output.deallocate() }
        try records.withUnsafeReadableBytes { sealed in
            let length = TLSRecordProtection.headerLength + recordContent + 1 + TLSRecordProtection.tagLength
            for _ in 0..<passes {
                let reader = try TLSRecordProtection(suite: suite, secret: secret, sealing: false)
                let start = threadCPUNanoseconds()
                for index in 0..<recordsPerPass {
                    let record = UnsafeRawBufferPointer(rebasing: sealed[(index * length)..<((index + 1) * length)])
                    guard reader.open(record, into: output.baseAddress! + index * slot) == slot else { throw CipherCostError() }
                }
                opening += threadCPUNanoseconds() - start
            }
        }
        let mebibytes = Double(passes * recordsPerPass * recordContent) / Double(1 << 20)
        return (Double(sealing) / 1000 / mebibytes, Double(opening) / 1000 / mebibytes)
    }

    private static func threadCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

struct CipherCostError: Error, CustomStringConvertible {
    var description: String { "a record sealed for the cipher's cost did not open" }
}
