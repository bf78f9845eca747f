import MultipeerDNS
import NIOCore

/// Bytes from hex written out in a test: whitespace is ignored, and so is everything after
/// "//" on a line, so vectors can carry their comments.
func hex(_ text: String) -> [UInt8] {
    var digits: [UInt8] = []
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        for character in code where !character.isWhitespace {
            guard let digit = character.hexDigitValue else { fatalError("not a hex digit: \(character)") }
            digits.append(UInt8(digit))
        }
    }
    precondition(digits.count % 2 == 0, "odd number of hex digits")
    return stride(from: 0, to: digits.count, by: 2).map { digits[$0] << 4 | digits[$0 + 1] }
}

func decode(_ bytes: [UInt8]) throws(DNSError) -> DNSMessage {
    try DNSMessage.decode(ByteBuffer(bytes: bytes))
}

/// The error decoding `bytes` throws, or nil if it decodes.
func decodeError(_ bytes: [UInt8]) -> DNSError? {
    do {
        _ = try decode(bytes)
        return nil
    } catch {
        return error
    }
}

func encodeError(_ message: DNSMessage) -> DNSError? {
    do {
        _ = try message.encoded()
        return nil
    } catch {
        return error
    }
}

func bytes(of buffer: ByteBuffer) -> [UInt8] {
    Array(buffer.readableBytesView)
}

/// Builds hand-made messages for the error tests, big-endian like the wire.
struct MessageBytes {
    var bytes: [UInt8] = []
    var count: Int { bytes.count }

    init(questions: Int = 0, answers: Int = 0, authorities: Int = 0, additionals: Int = 0, flags: UInt16 = 0) {
        u16(0)
        u16(flags)
        for count in [questions, answers, authorities, additionals] { u16(UInt16(count)) }
    }

    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u16(_ value: UInt16) { bytes += [UInt8(value >> 8), UInt8(value & 0xFF)] }
    mutating func u32(_ value: UInt32) { u16(UInt16(value >> 16)); u16(UInt16(value & 0xFFFF)) }
    mutating func raw(_ more: [UInt8]) { bytes += more }
    mutating func pointer(to offset: Int) { u16(0xC000 | UInt16(offset)) }

    /// Labels in place, ending with the root's zero byte.
    mutating func name(_ labels: [[UInt8]]) {
        for label in labels {
            u8(UInt8(label.count))
            raw(label)
        }
        u8(0)
    }

    mutating func name(_ dotted: String) {
        name(dotted.split(separator: ".").map { Array($0.utf8) })
    }

    /// Type and class after a question's name.
    mutating func questionTail(type: UInt16 = 12, qclass: UInt16 = 1) {
        u16(type)
        u16(qclass)
    }

    /// Type, class, TTL, rdlength and rdata after a record's name.
    mutating func recordTail(type: UInt16, rdlength: Int? = nil, rdata: [UInt8]) {
        u16(type)
        u16(1)
        u32(120)
        u16(UInt16(rdlength ?? rdata.count))
        raw(rdata)
    }
}
