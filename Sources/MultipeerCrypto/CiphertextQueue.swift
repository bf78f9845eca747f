import MultipeerWire
import NIOCore

/// Received ciphertext, oldest first, kept as the buffers it arrived in rather than joined.
package struct CiphertextQueue {
    private var buffers = CircularBuffer<ByteBuffer>(initialCapacity: 4)
    package private(set) var byteCount = 0

    package init() {}

    /// Past this many buffers they are joined into one: a peer that trickles a record a byte per
    /// segment would otherwise pin a received buffer, and its storage, per byte.
    static let joinThreshold = 64

    package mutating func append(_ bytes: ByteBuffer) {
        guard bytes.readableBytes > 0 else { return }
        buffers.append(bytes)
        byteCount += bytes.readableBytes
        if buffers.count >= Self.joinThreshold { join() }
    }

    /// The number of received buffers held (for tests).
    var bufferCount: Int { buffers.count }

    private mutating func join() {
        var joined = ByteBufferAllocator().buffer(capacity: byteCount)
        for var buffer in buffers { joined.writeBuffer(&buffer) }
        buffers.removeAll(keepingCapacity: true)
        buffers.append(joined)
    }

    /// Moves up to the destination's count of bytes into it; returns how many.
    mutating func read(into destination: UnsafeMutableRawBufferPointer) -> Int {
        let moved = buffers.readBytes(into: destination)
        byteCount -= moved
        return moved
    }

    /// Copies the first `destination.count` bytes without consuming them; false if fewer arrived.
    func peek(into destination: UnsafeMutableRawBufferPointer) -> Bool {
        guard byteCount >= destination.count else { return false }
        var copied = 0
        for buffer in buffers where copied < destination.count {
            let taken = min(buffer.readableBytes, destination.count - copied)
            buffer.withUnsafeReadableBytes { raw in
                (destination.baseAddress! + copied).copyMemory(from: raw.baseAddress!, byteCount: taken)
            }
            copied += taken
        }
        return true
    }

    /// Runs `body` over the first `count` bytes when they lie in one received buffer.
    func withContiguousPrefix<Result, Failure: Error>(
        _ count: Int, _ body: (UnsafeRawBufferPointer) throws(Failure) -> Result
    ) throws(Failure) -> Result? {
        guard let first = buffers.first, first.readableBytes >= count else { return nil }
        var outcome: Swift.Result<Result, Failure>?
        first.withUnsafeReadableBytes { raw in
            outcome = Swift.Result { () throws(Failure) in try body(UnsafeRawBufferPointer(rebasing: raw[..<count])) }
        }
        return try outcome?.get()
    }

    /// Drops the first `count` bytes, which must have arrived.
    mutating func skip(_ count: Int) {
        precondition(count <= byteCount, "skipping more ciphertext than arrived")
        var remaining = count
        while remaining > 0 {
            let available = buffers[buffers.startIndex].readableBytes
            if available <= remaining {
                buffers.removeFirst()
                remaining -= available
            } else {
                buffers[buffers.startIndex].moveReaderIndex(forwardBy: remaining)
                remaining = 0
            }
        }
        byteCount -= count
    }

    mutating func removeAll() {
        buffers.removeAll(keepingCapacity: true)
        byteCount = 0
    }
}
