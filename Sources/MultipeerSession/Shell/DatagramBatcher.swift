import NIOCore
import MultipeerProtocol

/// Joins sealed datagrams bound for the same address into one buffer that the kernel cuts back
/// into the same datagrams (UDP generic segmentation offload, `UDP_SEGMENT`), so a burst crosses
/// the network stack once per batch instead of once per datagram. The datagrams on the wire, and
/// their order to each address, are exactly what separate writes would have produced.
struct DatagramBatcher {
    /// Datagrams for one address, all `segmentSize` bytes long except possibly the last.
    struct Batch {
        let address: SocketAddress
        private(set) var buffer: ByteBuffer
        let segmentSize: Int
        private(set) var count: Int

        init(_ datagram: ByteBuffer, to address: SocketAddress) {
            self.address = address
            buffer = datagram
            segmentSize = datagram.readableBytes
            count = 1
        }

        /// The kernel's segment size for the write; nil for a lone datagram, which goes out plainly.
        var writtenSegmentSize: Int? { count > 1 ? segmentSize : nil }

        mutating func append(_ datagram: ByteBuffer, reserving capacity: Int) {
            if count == 1 {
                // The first datagram's own buffer is exactly its size: copy it once into room for more.
                var joined = ByteBufferAllocator().buffer(capacity: capacity)
                joined.writeImmutableBuffer(buffer)
                buffer = joined
            }
            buffer.writeImmutableBuffer(datagram)
            count += 1
        }
    }

    /// The kernel refuses a write of more segments than this (`UDP_MAX_SEGMENTS` on Linux).
    static let kernelSegmentLimit = 64

    let maximumSegments: Int
    let maximumBytes: Int
    private var open: [Batch] = []
    /// Bytes in batches not yet taken.
    private(set) var heldBytes = 0

    /// Tests raise the limits past what the kernel takes, to see it refuse.
    init(maximumSegments: Int = kernelSegmentLimit, maximumBytes: Int) {
        precondition(maximumSegments >= 1)
        self.maximumSegments = maximumSegments
        self.maximumBytes = maximumBytes
    }

    /// Adds a datagram; returns the batch it closed, if any, which must be written before any
    /// batch still open for the same address (none is: a closed batch is the address's only one).
    /// Only datagrams of 1 to `segmentLimit` bytes join others (`DatagramSegmentation`).
    mutating func add(_ datagram: ByteBuffer, to address: SocketAddress, segmentLimit: Int) -> Batch? {
        let size = datagram.readableBytes
        guard let index = open.firstIndex(where: { $0.address == address }) else {
            open.append(Batch(datagram, to: address))
            heldBytes += size
            return nil
        }
        // Plain values only: a copy of the batch kept past the append would make the append copy
        // the whole buffer (copy-on-write).
        let (count, bytes, segmentSize) = (open[index].count, open[index].buffer.readableBytes, open[index].segmentSize)
        let joins = count < maximumSegments && bytes + size <= maximumBytes && size <= segmentSize
            && size > 0 && segmentSize <= segmentLimit
        guard joins else {
            // Too many, too big, longer than the segments, or not to be joined: the batch goes as it is.
            heldBytes += size - bytes
            defer { open[index] = Batch(datagram, to: address) }
            return open[index]
        }
        // Room for the most this batch can take, not always the byte limit: small datagrams need little.
        open[index].append(datagram, reserving: min(maximumBytes, segmentSize * maximumSegments))
        heldBytes += size
        guard size == segmentSize else {
            // A shorter datagram can only be a batch's last segment.
            heldBytes -= open[index].buffer.readableBytes
            return open.remove(at: index)
        }
        return nil
    }

    /// Every open batch, each address's in the order its datagrams came.
    mutating func takeAll() -> [Batch] {
        defer {
            open.removeAll(keepingCapacity: true)
            heldBytes = 0
        }
        return open
    }
}

extension DatagramBatcher {
    /// The datagrams of a buffer that the kernel joined on receipt (UDP generic receive offload),
    /// as slices of it: `segmentSize` bytes each, the last possibly shorter.
    static func segments(of buffer: ByteBuffer, segmentSize: Int?) -> [ByteBuffer] {
        guard let segmentSize, segmentSize > 0, buffer.readableBytes > segmentSize else { return [buffer] }
        var rest = buffer
        var segments: [ByteBuffer] = []
        segments.reserveCapacity((buffer.readableBytes + segmentSize - 1) / segmentSize)
        while let segment = rest.readSlice(length: min(segmentSize, rest.readableBytes)), segment.readableBytes > 0 {
            segments.append(segment)
        }
        return segments
    }
}
