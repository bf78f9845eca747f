import DNSFuzzChecks
import Foundation
import MultipeerDNS
import NIOCore
import Testing

/// Every checked-in seed (real mDNS packets) and every past crash input, through the check the
/// fuzzer runs; the seeds must also decode.
@Suite("DNS fuzz corpus replay")
struct DNSFuzzCorpusReplayTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz")

    static func files(in folder: String) throws -> [URL] {
        let directory = fuzzDirectory.appendingPathComponent("\(folder)/fuzz-dns-message")
        guard FileManager.default.fileExists(atPath: directory.path) else { return [] }
        return try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.lastPathComponent != "README" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    @Test func seedsAreRealPacketsThatDecode() throws {
        let seeds = try Self.files(in: "Corpus")
        #expect(seeds.count >= 6)
        var types = Set<DNSRecordType>()
        var names = Set<DNSName>()
        var sawQuery = false
        var sawResponse = false
        for seed in seeds {
            let data = try Data(contentsOf: seed)
            data.withUnsafeBytes { DNSFuzzChecks.checkMessage($0) }
            let message = try DNSMessage.decode(ByteBuffer(bytes: data))
            if message.isResponse { sawResponse = true } else { sawQuery = true }
            for record in message.answers + message.authorities + message.additionals {
                types.insert(record.type)
                names.insert(record.name)
            }
            // Real packets end where their last record does: every shorter prefix is refused.
            for length in 0..<data.count {
                #expect(throws: DNSError.self, "\(seed.lastPathComponent) cut to \(length)") {
                    try DNSMessage.decode(ByteBuffer(bytes: data.prefix(length)))
                }
            }
        }
        #expect(sawQuery && sawResponse)
        #expect(types.isSuperset(of: [.ptr, .srv, .txt, .a]))
        // The instance names the capture registered, one from each implementation (python-zeroconf
        // splits "Peer Ünïcode.Dot" at its dot: two labels).
        let service = try DNSName("_mpc-test._tcp.local")
        #expect(names.contains(try service.prepending("Dot").prepending("Peer Ünïcode")))
        #expect(names.contains(try service.prepending("avahi peer")))
    }

    @Test func regressionsReplay() throws {
        for file in try Self.files(in: "Regressions") {
            let data = try Data(contentsOf: file)
            data.withUnsafeBytes { DNSFuzzChecks.checkMessage($0) }
        }
    }
}
