/// The fuzz input read front to back as a script. Past the end every read gives zero, so any
/// input is a valid script and a longer one only adds to it.
struct FuzzInput {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isExhausted: Bool { offset >= bytes.count }

    mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func bool() -> Bool { byte() & 1 != 0 }

    /// Big-endian, like the wire, so seeds read naturally in a hex dump.
    mutating func integer<Value: FixedWidthInteger & UnsignedInteger>(_: Value.Type = Value.self) -> Value {
        var value: Value = 0
        for _ in 0..<MemoryLayout<Value>.size { value = value << 8 | Value(byte()) }
        return value
    }

    /// A length byte (capped at `limit`) and then that many bytes, or fewer at the end.
    mutating func bytes(upTo limit: Int) -> [UInt8] {
        take(min(Int(byte()), limit))
    }

    mutating func take(_ count: Int) -> [UInt8] {
        let end = min(offset + count, bytes.count)
        guard offset < end else { return [] }
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
}
