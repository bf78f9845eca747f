import Foundation
import MultipeerWire
import Testing
import WireFuzzChecks

/// Every checked-in fuzz seed and every past crash input, through the same checks the fuzzers run.
@Suite("Fuzz corpus replay")
struct FuzzCorpusReplayTests {
    static let targets: [(name: String, check: @Sendable (UnsafeRawBufferPointer) -> Void)] = [
        ("fuzz-frame-decoder", WireFuzzChecks.checkFrameDecoder),
        ("fuzz-peer-id", WireFuzzChecks.checkPeerID),
        ("fuzz-connection-data", WireFuzzChecks.checkConnectionData),
    ]

    static func inputs(of target: String) throws -> [URL] {
        try ["Corpus", "Regressions"].flatMap { folder in
            let directory = repositoryRoot.appendingPathComponent("Fuzz/\(folder)/\(target)")
            guard FileManager.default.fileExists(atPath: directory.path) else { return [URL]() }
            return try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
        }
    }

    @Test(arguments: targets.map(\.name))
    func replayEveryInput(target: String) throws {
        let check = try #require(Self.targets.first { $0.name == target }?.check)
        let files = try Self.inputs(of: target)
        #expect(!files.isEmpty)
        for file in files {
            let data = try Data(contentsOf: file)
            data.withUnsafeBytes { check($0) }
        }
    }

    @Test func seedsAreTheSpecVectors() throws {
        let spec = try SpecVectors.load()
        for (name, bytes) in spec.vectors where name.hasPrefix("frame-") || name.hasPrefix("peer-id-") {
            let target = name.hasPrefix("frame-") ? "fuzz-frame-decoder" : "fuzz-peer-id"
            let seed = repositoryRoot.appendingPathComponent("Fuzz/Corpus/\(target)/\(name)")
            #expect(try Data(contentsOf: seed) == Data(bytes), "\(name): run Fuzz/make-seeds")
        }
    }
}
