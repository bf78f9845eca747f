import NIOCore

/// Received buffers kept in arrival order and read from the front without being joined.
extension CircularBuffer where Element == ByteBuffer {
    /// Copies up to `destination.count` bytes from the oldest buffers into `destination`,
    /// dropping each buffer once read out; returns how many bytes were copied.
    public mutating func readBytes(into destination: UnsafeMutableRawBufferPointer) -> Int {
        var copied = 0
        while copied < destination.count, !isEmpty {
            let index = startIndex
            let count = Swift.min(destination.count - copied, self[index].readableBytes)
            self[index].withUnsafeReadableBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: destination[copied..<(copied + count)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: source[..<count]))
            }
            self[index].moveReaderIndex(forwardBy: count)
            if self[index].readableBytes == 0 { _ = removeFirst() }
            copied += count
        }
        return copied
    }
}
