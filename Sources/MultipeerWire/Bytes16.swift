/// A 16-byte value (peer identifier, connection token, IPv6 address), compared as an unsigned
/// big-endian number as docs/PROTOCOL.md §7.5 requires.
public struct Bytes16: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64

    public static let zero = Bytes16(high: 0, low: 0)

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Nil unless `bytes` holds exactly 16 bytes.
    public init?<Bytes: Collection>(bytes: Bytes) where Bytes.Element == UInt8 {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in bytes.enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.init(high: high, low: low)
    }

    public static func random<Generator: RandomNumberGenerator>(using generator: inout Generator) -> Bytes16 {
        Bytes16(high: generator.next(), low: generator.next())
    }

    /// From the system CSPRNG (SystemRandomNumberGenerator reads getrandom on Linux).
    public static func random() -> Bytes16 {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    public var bytes: [UInt8] {
        (0..<16).map { index in
            let word = index < 8 ? high : low
            return UInt8(truncatingIfNeeded: word >> (56 - 8 * UInt64(index % 8)))
        }
    }

    public var isZero: Bool { high == 0 && low == 0 }

    public static func < (lhs: Bytes16, rhs: Bytes16) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }

    public var description: String {
        bytes.map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}

extension Bytes16 {
    /// Parses exactly 32 hexadecimal digits, as `description` prints them.
    public init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == 32 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for index in stride(from: 0, to: 32, by: 2) {
            guard let high = HexDigits.value(digits[index]), let low = HexDigits.value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        self.init(bytes: bytes)
    }
}
