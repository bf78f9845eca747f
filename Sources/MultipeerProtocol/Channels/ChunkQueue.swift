import NIOCore

/// Received bytes waiting for the application or the disk. Memory follows the bytes, not the
/// frame count: a peer that sends 1-byte frames (each its own TLS record, so each its own
/// buffer) would otherwise make us hold a buffer per byte. Small chunks are copied into a tail
/// buffer of our own; large ones are kept as the slices they arrived in.
package struct ChunkQueue {
    /// Chunks below this are copied together.
    static let coalescingThreshold = 16 * 1024
    static let tailCapacity = 64 * 1024

    private var chunks = CircularBuffer<ByteBuffer>()
    /// Whether the last chunk is our own tail buffer, which small chunks are appended to.
    private var tailIsOwned = false
    package private(set) var byteCount = 0

    package init() {}

    package var isEmpty: Bool { chunks.isEmpty }
    package var chunkCount: Int { chunks.count }

    package mutating func append(_ data: ByteBuffer) {
        guard data.readableBytes > 0 else { return }
        byteCount += data.readableBytes
        if data.readableBytes < Self.coalescingThreshold {
            if tailIsOwned, let last = chunks.indices.last, chunks[last].readableBytes + data.readableBytes <= Self.tailCapacity {
                chunks[last].writeImmutableBuffer(data)
                return
            }
            var tail = ByteBufferAllocator().buffer(capacity: Self.tailCapacity)
            tail.writeImmutableBuffer(data)
            chunks.append(tail)
            tailIsOwned = true
            return
        }
        chunks.append(data)
        tailIsOwned = false
    }

    /// The first chunk, whole.
    package mutating func popFirst() -> ByteBuffer? {
        guard let first = chunks.popFirst() else { return nil }
        if chunks.isEmpty { tailIsOwned = false }
        byteCount -= first.readableBytes
        return first
    }

    /// Copies up to `buffer.count` bytes out, in order; returns how many.
    package mutating func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var copied = 0
        while copied < buffer.count, var chunk = chunks.first {
            let count = Swift.min(chunk.readableBytes, buffer.count - copied)
            chunk.withUnsafeReadableBytes { raw in
                UnsafeMutableRawBufferPointer(rebasing: buffer[copied..<copied + count]).copyMemory(from: UnsafeRawBufferPointer(rebasing: raw.prefix(count)))
            }
            chunk.moveReaderIndex(forwardBy: count)
            copied += count
            if chunk.readableBytes == 0 {
                chunks.removeFirst()
                if chunks.isEmpty { tailIsOwned = false }
            } else {
                chunks[chunks.startIndex] = chunk
            }
        }
        byteCount -= copied
        return copied
    }

    /// Drops everything; returns how many bytes were dropped.
    package mutating func removeAll() -> Int {
        defer {
            chunks.removeAll()
            tailIsOwned = false
            byteCount = 0
        }
        return byteCount
    }
}
