import Foundation
@testable import MultipeerSession
import NIOCore
import Testing

/// A received resource's batches: one vectored write per batch, and write-back as it grows.
@Suite("File writes")
struct FileWriteTests {
    static func scratch() -> String { NSTemporaryDirectory() + "mpcp-filewrite-" + UUID().uuidString }

    /// More chunks than one system call takes, empty ones among them, land in order.
    @Test func chunksPastTheVectorLimitLandInOrder() throws {
        let path = Self.scratch()
        defer { unlink(path) }
        let file = try OpenFile.create(path)
        var expected: [UInt8] = []
        var chunks: [ByteBuffer] = []
        for index in 0..<(OpenFile.maximumVectors * 3 + 7) {
            let bytes = (0..<(index % 5 == 0 ? 0 : index % 300)).map { UInt8(truncatingIfNeeded: $0 &+ index) }
            expected += bytes
            chunks.append(ByteBuffer(bytes: bytes))
        }
        let (landed, error) = file.write(chunks[...], at: 5)
        #expect(error == nil)
        #expect(landed == expected.count)
        file.close()
        let stored = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(stored == [UInt8](repeating: 0, count: 5) + expected)
    }

    @Test func aFailedWriteSaysHowMuchLanded() throws {
        let path = Self.scratch()
        defer { unlink(path) }
        _ = try OpenFile.create(path)
        let (readOnly, _, _) = try OpenFile.openForReading(path)
        let (landed, error) = readOnly.write([ByteBuffer(bytes: [1, 2, 3])][...], at: 0)
        #expect(landed == 0)
        #expect(error?.description.hasPrefix("write:") == true)
    }

    /// Write-back windows as the file grows leave the content as written.
    @Test func writeBackKeepsTheContent() throws {
        let path = Self.scratch()
        defer { unlink(path) }
        let file = try OpenFile.create(path)
        let chunk = ByteBuffer(repeating: 0xA5, count: 1 << 20)
        var end: UInt64 = 0
        for _ in 0..<Int(OpenFile.writeBackWindow * 3 / (1 << 20)) + 1 {
            let (landed, error) = file.write([chunk][...], at: end)
            #expect(error == nil)
            end += UInt64(landed)
            file.writeBack(through: end)
        }
        try file.sync()
        #expect(try file.size() == end)
        file.close()
        let stored = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(stored.count == Int(end) && stored.allSatisfy { $0 == 0xA5 })
    }
}
