import NIOCore

extension DNSMessage {
    /// Decodes one whole UDP payload. Throws `DNSError` for anything malformed or over a limit;
    /// never traps, and allocates no more than `DNSLimits` allow.
    public static func decode(_ datagram: ByteBuffer) throws(DNSError) -> DNSMessage {
        var steps = 0
        return try decode(datagram, steps: &steps)
    }

    /// `decode`, also counting the labels and pointers read (so tests can see the work is bounded).
    static func decode(_ datagram: ByteBuffer, steps: inout Int) throws(DNSError) -> DNSMessage {
        guard datagram.readableBytes <= DNSLimits.maxMessageSize else {
            throw DNSError(.limitExceeded, "message is \(datagram.readableBytes) bytes, allowed \(DNSLimits.maxMessageSize)")
        }
        // Pointers index the whole message, so it is read from one array of at most 9,000 bytes.
        var reader = DNSMessageReader(Array(datagram.readableBytesView))
        defer { steps = reader.steps }

        let id = try reader.readUInt16("header id")
        let flags = try reader.readUInt16("header flags")
        var counts: [Int] = []
        for section in ["question", "answer", "authority", "additional"] {
            let count = Int(try reader.readUInt16("header \(section) count"))
            // Checked before anything is reserved for the section.
            guard count <= DNSLimits.maxRecordsPerSection else {
                throw DNSError(.limitExceeded, "\(count) \(section) entries, allowed \(DNSLimits.maxRecordsPerSection)")
            }
            counts.append(count)
        }

        var message = DNSMessage(
            id: id,
            isResponse: flags & responseFlag != 0,
            isAuthoritative: flags & authoritativeFlag != 0,
            isTruncated: flags & truncatedFlag != 0)
        message.opcode = UInt8(truncatingIfNeeded: flags >> opcodeShift) & 0x0F
        message.responseCode = UInt8(truncatingIfNeeded: flags) & 0x0F

        message.questions.reserveCapacity(counts[0])
        for index in 0..<counts[0] {
            message.questions.append(try reader.readQuestion(index))
        }
        message.answers = try reader.readRecords(counts[1], section: "answer")
        message.authorities = try reader.readRecords(counts[2], section: "authority")
        message.additionals = try reader.readRecords(counts[3], section: "additional")
        guard reader.isAtEnd else {
            throw DNSError(.trailingBytes, "\(reader.remainingBytes) bytes after the last record")
        }
        return message
    }
}

extension DNSMessageReader {
    fileprivate mutating func readQuestion(_ index: Int) throws(DNSError) -> DNSQuestion {
        let name = try readName("question \(index) name")
        let type = DNSRecordType(rawValue: try readUInt16("question \(index) type"))
        let qclass = try readUInt16("question \(index) class")
        return DNSQuestion(
            name: name, type: type, unicastResponse: qclass & DNSMessage.classTopBit != 0,
            recordClass: qclass & ~DNSMessage.classTopBit)
    }

    fileprivate mutating func readRecords(_ count: Int, section: String) throws(DNSError) -> [DNSResourceRecord] {
        var records: [DNSResourceRecord] = []
        records.reserveCapacity(count)
        for index in 0..<count {
            records.append(try readRecord("\(section) \(index)"))
        }
        return records
    }

    private mutating func readRecord(_ field: @autoclosure () -> String) throws(DNSError) -> DNSResourceRecord {
        let name = try readName("\(field()) name")
        let type = DNSRecordType(rawValue: try readUInt16("\(field()) type"))
        let rrclass = try readUInt16("\(field()) class")
        let ttl = try readUInt32("\(field()) ttl")
        let rdlength = Int(try readUInt16("\(field()) rdlength"))
        let data = try readRdata(length: rdlength, of: type) { (reader) throws(DNSError) -> DNSRecordData in
            try reader.readRecordData(type: type, length: rdlength, field())
        }
        return DNSResourceRecord(
            name: name, type: type, ttl: ttl, data: data, cacheFlush: rrclass & DNSMessage.classTopBit != 0,
            recordClass: rrclass & ~DNSMessage.classTopBit)
    }

    /// Called inside `readRdata`, which checks that the fields use up exactly `length` bytes.
    private mutating func readRecordData(
        type: DNSRecordType, length: Int, _ field: @autoclosure () -> String
    ) throws(DNSError) -> DNSRecordData {
        switch type {
        case .a:
            guard length == 4 else { throw DNSError(.invalidValue, "\(field()): A rdlength \(length), must be 4") }
            return .a(try readUInt32("\(field()) address"))
        case .aaaa:
            guard length == 16 else { throw DNSError(.invalidValue, "\(field()): AAAA rdlength \(length), must be 16") }
            return .aaaa(Array(try readBytes(16, "\(field()) address")))
        case .ptr:
            return .ptr(try readName("\(field()) PTR name"))
        case .srv:
            let priority = try readUInt16("\(field()) SRV priority")
            let weight = try readUInt16("\(field()) SRV weight")
            let port = try readUInt16("\(field()) SRV port")
            let target = try readName("\(field()) SRV target")
            return .srv(priority: priority, weight: weight, port: port, target: target)
        case .txt:
            return .txt(try readTXTStrings(field()))
        case .nsec:
            let next = try readName("\(field()) NSEC next name")
            return .nsec(next: next, types: try NSECTypeBitmap.decode(readRestOfRdata()))
        default:
            return .other(Array(readRestOfRdata()))
        }
    }

    /// One zero-length string alone, or no string at all, is an empty TXT record (RFC 6763 §6.1).
    private mutating func readTXTStrings(_ field: @autoclosure () -> String) throws(DNSError) -> [[UInt8]] {
        var strings: [[UInt8]] = []
        var rdata = readRestOfRdata()
        while let length = rdata.popFirst() {
            guard strings.count < DNSLimits.maxTXTStrings else {
                throw DNSError(.limitExceeded, "\(field()): over \(DNSLimits.maxTXTStrings) TXT strings")
            }
            guard Int(length) <= rdata.count else {
                throw DNSError(.invalidValue, "\(field()): TXT string of \(length) bytes runs past rdlength")
            }
            strings.append(Array(rdata.prefix(Int(length))))
            rdata = rdata.dropFirst(Int(length))
        }
        return strings == [[]] ? [] : strings
    }
}
