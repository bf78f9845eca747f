/// Writes one message into memory with name compression (RFC 1035 §4.1.4): each name suffix
/// written in full is remembered, case-insensitively, and a later name ending in it points
/// there. Output depends only on the message, never on hashing order.
struct DNSMessageWriter {
    private(set) var bytes: [UInt8] = []
    /// Where each name suffix written so far starts; only offsets a pointer can hold (< 0x4000).
    private var suffixOffsets: [NameSuffix: Int] = [:]

    init() {
        bytes.reserveCapacity(512)
    }

    mutating func writeUInt16(_ value: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    mutating func writeUInt32(_ value: UInt32) {
        writeUInt16(UInt16(truncatingIfNeeded: value >> 16))
        writeUInt16(UInt16(truncatingIfNeeded: value))
    }

    /// DNSName is always valid, so this cannot fail.
    mutating func writeName(_ name: DNSName) {
        for index in name.labels.indices {
            let suffix = NameSuffix(labels: name.labels[index...])
            if let offset = suffixOffsets[suffix] {
                writeUInt16(0xC000 | UInt16(offset))
                return
            }
            if bytes.count < 0x4000 { suffixOffsets[suffix] = bytes.count }
            let label = name.labels[index]
            bytes.append(UInt8(label.count))
            bytes.append(contentsOf: label)
        }
        bytes.append(0)
    }

    mutating func writeQuestion(_ question: DNSQuestion, _ field: @autoclosure () -> String) throws(DNSError) {
        writeName(question.name)
        writeUInt16(question.type.rawValue)
        writeUInt16((question.unicastResponse ? DNSMessage.classTopBit : 0) | (try Self.checkClass(question.recordClass, field())))
    }

    mutating func writeRecord(_ record: DNSResourceRecord, _ field: @autoclosure () -> String) throws(DNSError) {
        if let implied = record.data.impliedType, implied != record.type {
            throw DNSError(.invalidValue, "\(field()): type \(record.type) with \(implied) data")
        }
        writeName(record.name)
        writeUInt16(record.type.rawValue)
        writeUInt16((record.cacheFlush ? DNSMessage.classTopBit : 0) | (try Self.checkClass(record.recordClass, field())))
        writeUInt32(record.ttl)
        let lengthOffset = bytes.count
        writeUInt16(0)  // rdlength, filled in below
        switch record.data {
        case .a(let address):
            writeUInt32(address)
        case .aaaa(let address):
            guard address.count == 16 else {
                throw DNSError(.invalidValue, "\(field()): AAAA address of \(address.count) bytes, must be 16")
            }
            bytes.append(contentsOf: address)
        case .ptr(let name):
            writeName(name)
        case .srv(let priority, let weight, let port, let target):
            writeUInt16(priority)
            writeUInt16(weight)
            writeUInt16(port)
            writeName(target)
        case .txt(let strings):
            try writeTXTStrings(strings, field())
        case .nsec(let next, let types):
            writeName(next)
            NSECTypeBitmap.encode(types, into: &bytes)
        case .other(let rdata):
            guard rdata.count <= Int(UInt16.max) else {
                throw DNSError(.invalidValue, "\(field()): rdata of \(rdata.count) bytes, allowed 65535")
            }
            bytes.append(contentsOf: rdata)
        }
        let rdlength = bytes.count - lengthOffset - 2
        // Other rdata is capped above; the rest is small, but a 9,000-byte message is checked later.
        guard let length = UInt16(exactly: rdlength) else {
            throw DNSError(.limitExceeded, "\(field()): rdata of \(rdlength) bytes, allowed 65535")
        }
        bytes[lengthOffset] = UInt8(truncatingIfNeeded: length >> 8)
        bytes[lengthOffset + 1] = UInt8(truncatingIfNeeded: length)
    }

    /// No strings are sent as one empty string: an empty rdata is not allowed (RFC 6763 §6.1).
    private mutating func writeTXTStrings(_ strings: [[UInt8]], _ field: @autoclosure () -> String) throws(DNSError) {
        guard strings.count <= DNSLimits.maxTXTStrings else {
            throw DNSError(.limitExceeded, "\(field()): \(strings.count) TXT strings, allowed \(DNSLimits.maxTXTStrings)")
        }
        guard !strings.isEmpty else {
            bytes.append(0)
            return
        }
        for string in strings {
            guard let length = UInt8(exactly: string.count) else {
                throw DNSError(.invalidValue, "\(field()): TXT string of \(string.count) bytes, allowed 255")
            }
            bytes.append(length)
            bytes.append(contentsOf: string)
        }
    }

    /// The class shares its field with the QU or cache-flush bit, so it has 15 bits.
    private static func checkClass(_ recordClass: UInt16, _ field: @autoclosure () -> String) throws(DNSError) -> UInt16 {
        guard recordClass & DNSMessage.classTopBit == 0 else {
            throw DNSError(.invalidValue, "\(field()): class \(recordClass) does not fit in 15 bits")
        }
        return recordClass
    }
}

/// A name's labels from some index on, compared and hashed as `DNSName` is, without copying.
private struct NameSuffix: Hashable {
    let labels: ArraySlice<[UInt8]>

    static func == (lhs: NameSuffix, rhs: NameSuffix) -> Bool {
        DNSName.labelsEqual(lhs.labels, rhs.labels)
    }

    func hash(into hasher: inout Hasher) {
        DNSName.hashLabels(labels, into: &hasher)
    }
}
