/// The type bitmap of NSEC records (RFC 4034 §4.1.2): blocks of window number, length 1...32,
/// then bits, most significant first, for the 256 types of that window.
enum NSECTypeBitmap {
    /// Windows in increasing order, each as short as its highest type allows.
    static func encode(_ types: Set<DNSRecordType>, into bytes: inout [UInt8]) {
        // Sorted so that the output does not depend on the set's order.
        let sorted = types.map(\.rawValue).sorted()
        var index = sorted.startIndex
        while index < sorted.endIndex {
            let window = UInt8(truncatingIfNeeded: sorted[index] >> 8)
            var bits = [UInt8](repeating: 0, count: 32)
            var length = 0
            while index < sorted.endIndex, UInt8(truncatingIfNeeded: sorted[index] >> 8) == window {
                let low = Int(sorted[index] & 0xFF)
                bits[low / 8] |= 0x80 >> (low % 8)
                length = low / 8 + 1
                index += 1
            }
            bytes.append(window)
            bytes.append(UInt8(length))
            bytes.append(contentsOf: bits[..<length])
        }
    }

    /// Every set bit of `bitmap`, the rdata bytes after the next name. Windows must increase and
    /// have 1...32 bytes; trailing zero bytes and empty windows are allowed, though not sent.
    static func decode(_ bitmap: ArraySlice<UInt8>) throws(DNSError) -> Set<DNSRecordType> {
        var types = Set<DNSRecordType>()
        var index = bitmap.startIndex
        var previousWindow: Int?
        while index < bitmap.endIndex {
            guard bitmap.endIndex - index >= 2 else {
                throw DNSError(.invalidValue, "NSEC type bitmap: window header runs past rdlength")
            }
            let window = Int(bitmap[index])
            let length = Int(bitmap[index + 1])
            index += 2
            if let previousWindow, window <= previousWindow {
                throw DNSError(.invalidValue, "NSEC type bitmap: window \(window) after window \(previousWindow)")
            }
            previousWindow = window
            guard (1...32).contains(length) else {
                throw DNSError(.invalidValue, "NSEC type bitmap: window length \(length), allowed 1-32")
            }
            guard bitmap.endIndex - index >= length else {
                throw DNSError(.invalidValue, "NSEC type bitmap: window of \(length) bytes runs past rdlength")
            }
            for offset in 0..<length {
                let byte = bitmap[index + offset]
                for bit in 0..<8 where byte & (0x80 >> bit) != 0 {
                    types.insert(DNSRecordType(rawValue: UInt16(window << 8 | offset * 8 + bit)))
                }
            }
            index += length
        }
        return types
    }
}
