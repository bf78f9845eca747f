import MultipeerDNS
import NIOCore
import Testing

/// Every way a message can be refused, decoding and encoding.
@Suite("DNS errors")
struct DNSErrorTests {
    @Test func truncationAtEveryOffset() throws {
        for vector in [DNSVectorTests.ptrQueryQU, DNSVectorTests.dnssdResponse] {
            #expect(decodeError(vector) == nil)
            for length in 0..<vector.count {
                let error = decodeError(Array(vector.prefix(length)))
                #expect(error != nil, "a \(length)-byte prefix decoded")
                // Ends inside the rdata of a record whose rdlength says more is coming: truncated too.
                #expect(error?.code == .truncated, "\(length): \(String(describing: error))")
            }
        }
    }

    @Test func forwardPointer() {
        var message = MessageBytes(questions: 1)
        message.pointer(to: 14)  // to its own type field, after it
        message.questionTail()
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }

    @Test func selfPointer() {
        var message = MessageBytes(questions: 1)
        message.pointer(to: 12)
        message.questionTail()
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }

    @Test func pointerBackToItsOwnName() {
        var message = MessageBytes(questions: 1)
        message.raw([1, 0x61])
        message.pointer(to: 12)  // "a" then back to "a": a loop through one label
        message.questionTail()
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }

    /// A two-pointer loop entered through a backward pointer: two pointers inside raw rdata
    /// that point at each other, and an owner name pointing at the second.
    @Test func twoPointerLoop() {
        var message = MessageBytes(answers: 2)
        message.u8(0)  // @12 root owner
        let loop = 12 + 1 + 10
        message.recordTail(type: 99, rdata: [0xC0, UInt8(loop + 2), 0xC0, UInt8(loop)])
        message.pointer(to: loop + 2)
        message.recordTail(type: 99, rdata: [])
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }

    /// "a", then a chain of `pointers` pointers each to the one before, inside raw rdata; then
    /// an owner name that points to the last: `pointers + 1` hops.
    static func pointerChain(_ pointers: Int) -> [UInt8] {
        var message = MessageBytes(answers: 2)
        message.u8(0)
        let start = 12 + 1 + 10
        var rdata: [UInt8] = [1, 0x61, 0]
        var previous = start
        for _ in 0..<pointers {
            let here = start + rdata.count
            rdata += [0xC0 | UInt8(previous >> 8), UInt8(previous & 0xFF)]
            previous = here
        }
        message.recordTail(type: 99, rdata: rdata)
        message.pointer(to: previous)
        message.recordTail(type: 99, rdata: [])
        return message.bytes
    }

    @Test func pointerHops() throws {
        let sixtyFour = try decode(Self.pointerChain(63))
        #expect(sixtyFour.answers[1].name == (try DNSName("a")))
        #expect(decodeError(Self.pointerChain(64))?.code == .badPointer)
    }

    @Test func pointerIntoTheHeader() {
        var message = MessageBytes(questions: 1)
        message.pointer(to: 4)
        message.questionTail()
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }

    @Test func nameLengths() throws {
        let label63 = [UInt8](repeating: 0x61, count: 63)
        var longest = MessageBytes(questions: 1)
        longest.name([label63, label63, label63, [UInt8](repeating: 0x62, count: 61)])  // 255 bytes
        longest.questionTail()
        #expect(try decode(longest.bytes).questions[0].name.labels.count == 4)

        var tooLong = MessageBytes(questions: 1)
        tooLong.name([label63, label63, label63, [UInt8](repeating: 0x62, count: 62)])  // 256 bytes
        tooLong.questionTail()
        #expect(decodeError(tooLong.bytes)?.code == .nameTooLong)

        // Too long only once decompressed: 64 bytes in place, then a 193-byte name.
        var viaPointer = MessageBytes(questions: 2)
        viaPointer.name([label63, label63, label63])
        viaPointer.questionTail()
        viaPointer.raw([63] + label63)
        viaPointer.pointer(to: 12)
        viaPointer.questionTail()
        #expect(decodeError(viaPointer.bytes)?.code == .nameTooLong)
    }

    @Test func reservedLabelTypes() {
        for lengthByte: UInt8 in [0x40, 0x80, 0xBF] {
            var message = MessageBytes(questions: 1)
            message.u8(lengthByte)  // a "label" of 64 bytes, or type 10
            message.raw([UInt8](repeating: 0x61, count: 64))
            message.u8(0)
            message.questionTail()
            #expect(decodeError(message.bytes)?.code == .invalidLabel)
        }
    }

    @Test func headerCountsAboveTheCap() {
        let cap = DNSLimits.maxRecordsPerSection
        for section in 0..<4 {
            var counts = [0, 0, 0, 0]
            counts[section] = cap + 1
            let message = MessageBytes(
                questions: counts[0], answers: counts[1], authorities: counts[2], additionals: counts[3])
            #expect(decodeError(message.bytes)?.code == .limitExceeded)
            counts[section] = cap
            let atCap = MessageBytes(
                questions: counts[0], answers: counts[1], authorities: counts[2], additionals: counts[3])
            #expect(decodeError(atCap.bytes)?.code == .truncated)
        }
        var full = MessageBytes(questions: 0xFFFF)
        full.raw([UInt8](repeating: 0, count: 100))
        #expect(decodeError(full.bytes)?.code == .limitExceeded)
    }

    static func record(type: UInt16, rdlength: Int? = nil, rdata: [UInt8]) -> [UInt8] {
        var message = MessageBytes(answers: 1)
        message.name("host.local")
        message.recordTail(type: type, rdlength: rdlength, rdata: rdata)
        return message.bytes
    }

    @Test func rdlengthThatDoesNotFitTheType() {
        #expect(decodeError(Self.record(type: 1, rdata: [10, 0, 0, 1])) == nil)
        #expect(decodeError(Self.record(type: 1, rdata: [10, 0, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 1, rdata: [10, 0, 0, 1, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 28, rdata: [UInt8](repeating: 0, count: 16))) == nil)
        #expect(decodeError(Self.record(type: 28, rdata: [UInt8](repeating: 0, count: 15)))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 28, rdata: [UInt8](repeating: 0, count: 17)))?.code == .invalidValue)
        // PTR: a byte after the name, and a name that runs past rdlength.
        #expect(decodeError(Self.record(type: 12, rdata: [1, 0x61, 0])) == nil)
        #expect(decodeError(Self.record(type: 12, rdata: [1, 0x61, 0, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 12, rdlength: 2, rdata: [1, 0x61, 0, 0, 0, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 12, rdata: [0xC0, 0x0C, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 12, rdata: [0xC0]))?.code == .invalidValue)
        // SRV: too short for its fixed fields; a target running past; a byte left over.
        #expect(decodeError(Self.record(type: 33, rdata: [0, 0, 0, 0, 0x10, 0x92, 0xC0, 0x0C])) == nil)
        #expect(decodeError(Self.record(type: 33, rdata: [0, 0, 0, 0, 0x10]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 33, rdata: [0, 0, 0, 0, 0x10, 0x92, 0xC0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 33, rdata: [0, 0, 0, 0, 0x10, 0x92, 0xC0, 0x0C, 0]))?.code == .invalidValue)
        // TXT: a string running past rdlength.
        #expect(decodeError(Self.record(type: 16, rdata: [5, 0x61]))?.code == .invalidValue)
        // NSEC: next name running past; windows of 0 and 33 bytes, out of order, repeated, cut short.
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 0, 1, 0x40])) == nil)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 0, 0]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 0, 33] + [UInt8](repeating: 0, count: 33)))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 1, 1, 0x40, 0, 1, 0x40]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 1, 1, 0x40, 1, 1, 0x40]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 0, 2, 0x40]))?.code == .invalidValue)
        #expect(decodeError(Self.record(type: 47, rdata: [0xC0, 0x0C, 0]))?.code == .invalidValue)
        // rdlength past the end of the message.
        #expect(decodeError(Self.record(type: 99, rdlength: 5, rdata: [1, 2]))?.code == .truncated)
    }

    @Test func tooManyTXTStrings() {
        let cap = DNSLimits.maxTXTStrings
        #expect(decodeError(Self.record(type: 16, rdata: [UInt8](repeating: 0, count: cap))) == nil)
        #expect(decodeError(Self.record(type: 16, rdata: [UInt8](repeating: 0, count: cap + 1)))?.code == .limitExceeded)
    }

    @Test func trailingBytes() {
        #expect(decodeError(DNSVectorTests.ptrQueryQU + [0])?.code == .trailingBytes)
        #expect(decodeError(DNSVectorTests.dnssdResponse + [0xC0, 0x0C])?.code == .trailingBytes)
    }

    @Test func oversizeMessage() {
        var message = MessageBytes(answers: 1)
        message.u8(0)
        message.recordTail(type: 99, rdata: [UInt8](repeating: 0, count: DNSLimits.maxMessageSize - 23))
        #expect(message.count == DNSLimits.maxMessageSize)
        #expect(decodeError(message.bytes) == nil)
        message.raw([0])
        #expect(decodeError(message.bytes)?.code == .limitExceeded)
    }

    @Test func oversizeEncode() throws {
        let name = try DNSName("host.local")
        func rawRecord(_ count: Int) -> DNSResourceRecord {
            DNSResourceRecord(name: name, type: DNSRecordType(rawValue: 99), ttl: 1, data: .other([UInt8](repeating: 7, count: count)))
        }
        // 12 + 12 + 10 = 34 bytes around the rdata.
        let fits = DNSMessage(isResponse: true, answers: [rawRecord(DNSLimits.maxMessageSize - 34)])
        #expect(try fits.encoded().readableBytes == DNSLimits.maxMessageSize)
        let over = DNSMessage(isResponse: true, answers: [rawRecord(DNSLimits.maxMessageSize - 33)])
        #expect(encodeError(over)?.code == .limitExceeded)
        // Many small records add up too.
        let many = DNSMessage(isResponse: true, answers: (0..<256).map { _ in rawRecord(30) }, additionals: (0..<100).map { _ in rawRecord(30) })
        #expect(encodeError(many)?.code == .limitExceeded)
        // Nothing is written when encoding fails.
        var buffer = ByteBuffer(bytes: [1, 2, 3])
        #expect(throws: DNSError.self) { try over.encode(into: &buffer) }
        #expect(bytes(of: buffer) == [1, 2, 3])
        #expect(encodeError(DNSMessage(isResponse: true, answers: [rawRecord(70_000)]))?.code == .invalidValue)
    }

    @Test func encoderRefusesWhatTheDecoderWould() throws {
        let name = try DNSName("host.local")
        let question = DNSQuestion(name: name, type: .a)
        #expect(encodeError(DNSMessage(isResponse: false, questions: Array(repeating: question, count: 257)))?.code == .limitExceeded)
        #expect(encodeError(DNSMessage(isResponse: false, questions: Array(repeating: question, count: 256))) == nil)
        var opcode = DNSMessage(isResponse: false)
        opcode.opcode = 16
        #expect(encodeError(opcode)?.code == .invalidValue)
        var rcode = DNSMessage(isResponse: false)
        rcode.responseCode = 16
        #expect(encodeError(rcode)?.code == .invalidValue)
        let badClass = DNSQuestion(name: name, type: .a, recordClass: 0x8001)
        #expect(encodeError(DNSMessage(isResponse: false, questions: [badClass]))?.code == .invalidValue)
        func answer(_ record: DNSResourceRecord) -> DNSMessage { DNSMessage(isResponse: true, answers: [record]) }
        #expect(encodeError(answer(DNSResourceRecord(name: name, ttl: 1, data: .a(1), recordClass: 0x8000)))?.code == .invalidValue)
        #expect(encodeError(answer(DNSResourceRecord(name: name, ttl: 1, data: .aaaa([1, 2, 3]))))?.code == .invalidValue)
        #expect(encodeError(answer(DNSResourceRecord(name: name, ttl: 1, data: .txt([[UInt8](repeating: 0x61, count: 256)]))))?.code == .invalidValue)
        #expect(encodeError(answer(DNSResourceRecord(name: name, ttl: 1, data: .txt([[UInt8](repeating: 0x61, count: 255)])))) == nil)
        #expect(encodeError(answer(DNSResourceRecord(name: name, ttl: 1, data: .txt(Array(repeating: [0x61], count: 257)))))?.code == .limitExceeded)
        #expect(encodeError(answer(DNSResourceRecord(name: name, type: .srv, ttl: 1, data: .a(1))))?.code == .invalidValue)
        // Raw rdata under a known type is sent as it is.
        #expect(encodeError(answer(DNSResourceRecord(name: name, type: .a, ttl: 1, data: .other([1, 2, 3, 4])))) == nil)
    }

    @Test func errorsDescribeThemselves() {
        let error = DNSError(.badPointer, "pointer at 12 to 12, not before 12")
        #expect(error.description == "malformed DNS message (badPointer): pointer at 12 to 12, not before 12")
        #expect(error == DNSError(.badPointer, "pointer at 12 to 12, not before 12"))
        #expect(DNSError.Code.truncated != .trailingBytes)
    }
}
