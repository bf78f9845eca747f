import NIOCore

extension DNSMessage {
    /// Encodes with name compression, also in the rdata of PTR, SRV and NSEC (RFC 6762 §18.14).
    /// Output is deterministic. Throws `limitExceeded` if a section holds more than
    /// `DNSLimits.maxRecordsPerSection` entries or the result exceeds `DNSLimits.maxMessageSize`,
    /// and `invalidValue` for fields that do not fit (opcode, class, AAAA length, ...). Nothing is
    /// written to `buffer` unless the whole message encodes.
    public func encode(into buffer: inout ByteBuffer) throws(DNSError) {
        let bytes = try encodedBytes()
        buffer.writeBytes(bytes)
    }

    public func encoded() throws(DNSError) -> ByteBuffer {
        ByteBuffer(bytes: try encodedBytes())
    }

    private func encodedBytes() throws(DNSError) -> [UInt8] {
        guard opcode <= 0x0F else { throw DNSError(.invalidValue, "opcode \(opcode) does not fit in 4 bits") }
        guard responseCode <= 0x0F else { throw DNSError(.invalidValue, "rcode \(responseCode) does not fit in 4 bits") }
        let sections = [
            ("question", questions.count), ("answer", answers.count), ("authority", authorities.count),
            ("additional", additionals.count),
        ]
        for (section, count) in sections where count > DNSLimits.maxRecordsPerSection {
            throw DNSError(.limitExceeded, "\(count) \(section) entries, allowed \(DNSLimits.maxRecordsPerSection)")
        }

        var writer = DNSMessageWriter()
        writer.writeUInt16(id)
        var flags = UInt16(opcode) << Self.opcodeShift | UInt16(responseCode)
        if isResponse { flags |= Self.responseFlag }
        if isAuthoritative { flags |= Self.authoritativeFlag }
        if isTruncated { flags |= Self.truncatedFlag }
        writer.writeUInt16(flags)
        for (_, count) in sections { writer.writeUInt16(UInt16(count)) }

        for (index, question) in questions.enumerated() {
            try writer.writeQuestion(question, "question \(index)")
            try Self.checkSize(writer)
        }
        for (section, records) in [("answer", answers), ("authority", authorities), ("additional", additionals)] {
            for (index, record) in records.enumerated() {
                try writer.writeRecord(record, "\(section) \(index)")
                // After each entry, so an oversized message stops growing within one rdata.
                try Self.checkSize(writer)
            }
        }
        return writer.bytes
    }

    private static func checkSize(_ writer: DNSMessageWriter) throws(DNSError) {
        guard writer.bytes.count <= DNSLimits.maxMessageSize else {
            throw DNSError(.limitExceeded, "message over \(DNSLimits.maxMessageSize) bytes")
        }
    }
}
