/// Reads one whole message held in memory. Fields are read in order from `position`; names
/// may also jump back to earlier bytes through compression pointers (RFC 1035 §4.1.4).
///
/// Work is bounded by the caps: a name reads at most 127 labels and `maxPointerHops` pointers,
/// and every pointer goes strictly backwards, so no input loops.
struct DNSMessageReader {
    private let bytes: [UInt8]
    private(set) var position = 0
    /// The end of the rdata being read, if any: fields must stay inside it.
    private var rdataEnd: Int?
    /// Labels and pointers read so far, for tests that check the work stays bounded.
    private(set) var steps = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { position == bytes.count }
    var remainingBytes: Int { bytes.count - position }

    private var end: Int { rdataEnd ?? bytes.count }

    /// Running past rdlength is a malformed record; running past the message, a truncated one.
    private func overrun(_ field: @autoclosure () -> String, inRdata: Bool) -> DNSError {
        inRdata
            ? DNSError(.invalidValue, "\(field()): runs past rdlength")
            : DNSError(.truncated, "\(field()): the message ends first")
    }

    private func need(_ count: Int, _ field: @autoclosure () -> String) throws(DNSError) {
        guard count <= end - position else { throw overrun(field(), inRdata: rdataEnd != nil) }
    }

    mutating func readUInt8(_ field: @autoclosure () -> String) throws(DNSError) -> UInt8 {
        try need(1, field())
        defer { position += 1 }
        return bytes[position]
    }

    mutating func readUInt16(_ field: @autoclosure () -> String) throws(DNSError) -> UInt16 {
        try need(2, field())
        defer { position += 2 }
        return UInt16(bytes[position]) << 8 | UInt16(bytes[position + 1])
    }

    mutating func readUInt32(_ field: @autoclosure () -> String) throws(DNSError) -> UInt32 {
        let high = try readUInt16(field())
        let low = try readUInt16(field())
        return UInt32(high) << 16 | UInt32(low)
    }

    /// `count` is at most 65,535 here (a u16 or a u8), and is checked against what is left first.
    mutating func readBytes(_ count: Int, _ field: @autoclosure () -> String) throws(DNSError) -> ArraySlice<UInt8> {
        try need(count, field())
        defer { position += count }
        return bytes[position..<position + count]
    }

    /// The rest of the current rdata.
    mutating func readRestOfRdata() -> ArraySlice<UInt8> {
        defer { position = end }
        return bytes[position..<end]
    }

    /// Reads the rdata of `rdlength` bytes with `body`, which must consume it exactly.
    mutating func readRdata<Result>(
        length rdlength: Int, of type: DNSRecordType, _ body: (inout DNSMessageReader) throws(DNSError) -> Result
    ) throws(DNSError) -> Result {
        guard rdlength <= remainingBytes else {
            throw DNSError(.truncated, "\(type) rdata: rdlength \(rdlength), \(remainingBytes) bytes left")
        }
        let rdataEnd = position + rdlength
        self.rdataEnd = rdataEnd
        defer { self.rdataEnd = nil }
        let result = try body(&self)
        guard position == rdataEnd else {
            throw DNSError(.invalidValue, "\(type) rdata: \(rdataEnd - position) bytes left after its fields")
        }
        return result
    }

    /// A name, following compression pointers. Each pointer must land before the run of labels
    /// that holds it (so strictly backwards, never on itself) and after the header.
    mutating func readName(_ field: @autoclosure () -> String) throws(DNSError) -> DNSName {
        var labels: [[UInt8]] = []
        var length = 1  // the final zero byte
        var cursor = position
        var runStart = position
        var limit = end  // the name's own bytes stay in the rdata; pointed-to ones, in the message
        var hops = 0
        var jumped = false
        while true {
            steps += 1
            guard cursor < limit else { throw overrun(field(), inRdata: !jumped && rdataEnd != nil) }
            let lengthByte = bytes[cursor]
            switch lengthByte >> 6 {
            case 0b00 where lengthByte == 0:
                if !jumped { position = cursor + 1 }
                return DNSName(uncheckedLabels: labels)
            case 0b00:
                let count = Int(lengthByte)
                length += 1 + count
                guard length <= DNSLimits.maxNameLength else {
                    throw DNSError(.nameTooLong, "\(field()): over \(DNSLimits.maxNameLength) bytes decompressed")
                }
                guard count < limit - cursor else { throw overrun(field(), inRdata: !jumped && rdataEnd != nil) }
                labels.append(Array(bytes[cursor + 1...cursor + count]))
                cursor += 1 + count
            case 0b11:
                guard limit - cursor >= 2 else { throw overrun(field(), inRdata: !jumped && rdataEnd != nil) }
                let target = Int(lengthByte & 0x3F) << 8 | Int(bytes[cursor + 1])
                guard target < runStart else {
                    throw DNSError(.badPointer, "\(field()): pointer at \(cursor) to \(target), not before \(runStart)")
                }
                guard target >= DNSLimits.headerLength else {
                    throw DNSError(.badPointer, "\(field()): pointer at \(cursor) into the header")
                }
                hops += 1
                guard hops <= DNSLimits.maxPointerHops else {
                    throw DNSError(.badPointer, "\(field()): more than \(DNSLimits.maxPointerHops) pointers")
                }
                if !jumped { position = cursor + 2 }
                jumped = true
                limit = bytes.count
                cursor = target
                runStart = target
            default:
                throw DNSError(.invalidLabel, "\(field()): label type \(lengthByte >> 6) at \(cursor) is reserved")
            }
        }
    }
}
