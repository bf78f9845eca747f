import NIOCore

// Checked reads: every length is compared with its limit before anything is read or allocated,
// and running out of bytes is a typed error rather than a nil to forget about. Field names are
// autoclosures: an interpolated name costs nothing unless an error is thrown.
extension ByteBuffer {
    mutating func readWireInteger<Integer: FixedWidthInteger>(
        as: Integer.Type = Integer.self, _ field: @autoclosure () -> String
    ) throws(WireError) -> Integer {
        guard let value = readInteger(as: Integer.self) else {
            throw WireError(.truncated, "\(field()): needs \(MemoryLayout<Integer>.size) bytes")
        }
        return value
    }

    mutating func readWireBytes16(_ field: @autoclosure () -> String) throws(WireError) -> Bytes16 {
        let high: UInt64 = try readWireInteger(field())
        let low: UInt64 = try readWireInteger(field())
        return Bytes16(high: high, low: low)
    }

    mutating func readWireSlice(length: Int, _ field: @autoclosure () -> String) throws(WireError) -> ByteBuffer {
        guard let slice = readSlice(length: length) else {
            throw WireError(.truncated, "\(field()): needs \(length) bytes, \(readableBytes) left")
        }
        return slice
    }

    /// A `u8` count then that many bytes of strict UTF-8, the count being within `allowed`.
    mutating func readWireString8(_ field: @autoclosure () -> String, allowed: ClosedRange<Int>) throws(WireError) -> String {
        let length = Int(try readWireInteger(as: UInt8.self, field()))
        guard allowed.contains(length) else {
            throw WireError(.invalidLength, "\(field()): \(length) bytes, allowed \(allowed.lowerBound)-\(allowed.upperBound)")
        }
        let slice = try readWireSlice(length: length, field())
        let string = slice.withUnsafeReadableBytes { String(validating: $0, as: UTF8.self) }
        guard let string else { throw WireError(.invalidUTF8, "\(field()): ill-formed UTF-8") }
        return string
    }

    func requireFullyRead(_ structure: @autoclosure () -> String) throws(WireError) {
        guard readableBytes == 0 else {
            throw WireError(.trailingBytes, "\(structure()): \(readableBytes) bytes after the last field")
        }
    }

    mutating func readWireReservedZero<Integer: FixedWidthInteger>(
        as: Integer.Type, _ field: @autoclosure () -> String
    ) throws(WireError) {
        guard try readWireInteger(as: Integer.self, field()) == 0 else {
            throw WireError(.nonZeroReserved, "\(field()) must be zero")
        }
    }
}

extension ByteBuffer {
    mutating func writeBytes16(_ value: Bytes16) {
        writeInteger(value.high)
        writeInteger(value.low)
    }

    /// Writes a `u8`-counted UTF-8 string; the caller has checked the length.
    mutating func writeString8(_ string: String) {
        writeInteger(UInt8(string.utf8.count))
        writeString(string)
    }
}

/// Checks an outgoing string against a length range, so encoders never emit what decoders reject.
func checkString8(_ string: String, _ field: @autoclosure () -> String, allowed: ClosedRange<Int>) throws(WireError) {
    let length = string.utf8.count
    guard allowed.contains(length) else {
        throw WireError(.invalidLength, "\(field()): \(length) bytes, allowed \(allowed.lowerBound)-\(allowed.upperBound)")
    }
}
