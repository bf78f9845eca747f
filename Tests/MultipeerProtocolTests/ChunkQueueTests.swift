import NIOCore
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

/// Memory for received bytes follows the bytes, not the peer's frame sizes.
@Suite("Chunk queue")
struct ChunkQueueTests {
    @Test func oneByteFramesCostTheirBytesNotABufferEach() {
        var queue = ChunkQueue()
        for index in 0..<100_000 { queue.append(ByteBuffer(bytes: [UInt8(truncatingIfNeeded: index)])) }
        #expect(queue.byteCount == 100_000)
        #expect(queue.chunkCount <= 100_000 / ChunkQueue.tailCapacity + 1)
        var out = [UInt8](repeating: 0, count: 100_000)
        #expect(out.withUnsafeMutableBytes { queue.read(into: $0) } == 100_000)
        #expect(out == (0..<100_000).map { UInt8(truncatingIfNeeded: $0) })
        #expect(queue.isEmpty && queue.byteCount == 0)
    }

    @Test func largeChunksAreKeptAsTheyCameAndOrderIsKept() {
        var queue = ChunkQueue()
        queue.append(ByteBuffer(repeating: 1, count: 3))
        queue.append(ByteBuffer(repeating: 2, count: 20_000))
        queue.append(ByteBuffer(repeating: 3, count: 5))
        #expect(queue.chunkCount == 3 && queue.byteCount == 20_008)
        var bytes: [UInt8] = []
        while let chunk = queue.popFirst() { bytes += chunk.readableBytesView }
        #expect(bytes == [1, 1, 1] + [UInt8](repeating: 2, count: 20_000) + [3, 3, 3, 3, 3])
        queue.append(ByteBuffer(repeating: 4, count: 10))
        #expect(queue.removeAll() == 10 && queue.isEmpty)
    }
}
