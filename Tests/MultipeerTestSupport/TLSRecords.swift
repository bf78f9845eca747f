import NIOCore

/// The records in what a TLS 1.3 sender wrote, read from their 5-byte headers.
public enum TLSRecords {
    /// Each record's length, in order; nil unless the bytes are whole application-data records
    /// (type 23, 0x0303 outside, as TLS 1.3 writes every record after the handshake).
    public static func lengths(in wire: [ByteBuffer]) -> [Int]? {
        var joined = ByteBuffer()
        for var part in wire { joined.writeBuffer(&part) }
        var lengths: [Int] = []
        while joined.readableBytes > 0 {
            guard let type = joined.readInteger(as: UInt8.self), let version = joined.readInteger(as: UInt16.self),
                let length = joined.readInteger(as: UInt16.self), type == 23, version == 0x0303,
                joined.readableBytes >= Int(length)
            else { return nil }
            joined.moveReaderIndex(forwardBy: Int(length))
            lengths.append(Int(length))
        }
        return lengths
    }
}
