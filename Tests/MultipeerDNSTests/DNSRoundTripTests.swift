import MultipeerDNS
import MultipeerTestSupport
import NIOCore
import Testing

/// Random messages from a seeded generator: encoding then decoding gives the same message.
@Suite("DNS round trips")
struct DNSRoundTripTests {
    /// Label pieces: dots, a backslash, upper case, non-ASCII UTF-8, spaces.
    static let pieces = [
        "a", "B", "peer", "Peer", "_mpc", "_tcp", "_udp", "local", "LOCAL", "x.y", "Dr.", "back\\slash", "é", "Ünï",
        "日本", "🙂", " ", "-", "0",
    ]

    struct Generator {
        var random: SeededGenerator
        /// Names seen so far, so later ones share suffixes and get compressed.
        var names: [DNSName] = []

        mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }
        mutating func bool() -> Bool { Bool.random(using: &random) }
        mutating func bytes(_ range: ClosedRange<Int>) -> [UInt8] {
            (0..<int(range)).map { _ in UInt8.random(in: 0...255, using: &random) }
        }

        mutating func label() -> [UInt8] {
            var label: [UInt8] = []
            for _ in 0..<int(1...3) { label += Array(DNSRoundTripTests.pieces[int(0...DNSRoundTripTests.pieces.count - 1)].utf8) }
            return label
        }

        mutating func name() throws -> DNSName {
            var name: DNSName
            if !names.isEmpty && int(0...2) > 0 {
                name = names[int(0...names.count - 1)]
                // Sometimes the same name in another case, which compresses to the first one.
                if bool() {
                    name = try DNSName(labels: name.labels.map { $0.map { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 } })
                }
                for _ in 0..<int(0...2) { name = try name.prepending(label()) }
            } else {
                name = try DNSName(labels: (0..<int(0...4)).map { _ in label() })
            }
            names.append(name)
            return name
        }

        mutating func recordClass() -> UInt16 {
            [1, 1, 1, 3, 255, 0x7FFF, 0][int(0...6)]
        }

        mutating func record() throws -> DNSResourceRecord {
            let name = try name()
            let ttl = [0, 120, 4500, UInt32.max][int(0...3)]
            let cacheFlush = bool()
            let recordClass = recordClass()
            let data: DNSRecordData
            switch int(0...6) {
            case 0: data = .a(UInt32.random(in: 0...UInt32.max, using: &random))
            case 1: data = .aaaa(bytes(16...16))
            case 2: data = .ptr(try self.name())
            case 3:
                data = .srv(
                    priority: UInt16(int(0...65535)), weight: UInt16(int(0...65535)), port: UInt16(int(0...65535)),
                    target: try self.name())
            case 4:
                // [[]] is the one value that does not come back as itself: it is how [] is sent.
                let strings = (0..<int(0...5)).map { _ in bytes(0...20) }
                data = .txt(strings == [[]] ? [] : strings)
            case 5:
                let pool: [UInt16] = [1, 12, 16, 28, 33, 47, 255, 256, 1000, 32768, 65535]
                data = .nsec(
                    next: try self.name(),
                    types: Set((0..<int(0...5)).map { _ in DNSRecordType(rawValue: pool[int(0...pool.count - 1)]) }))
            default:
                let type = DNSRecordType(rawValue: [5, 13, 99, 255, 65280][int(0...4)])
                return DNSResourceRecord(
                    name: name, type: type, ttl: ttl, data: .other(bytes(0...40)), cacheFlush: cacheFlush,
                    recordClass: recordClass)
            }
            return DNSResourceRecord(name: name, ttl: ttl, data: data, cacheFlush: cacheFlush, recordClass: recordClass)
        }

        mutating func message() throws -> DNSMessage {
            names = []
            var message = DNSMessage(
                id: UInt16(int(0...65535)), isResponse: bool(), isAuthoritative: bool(), isTruncated: bool())
            message.opcode = UInt8(int(0...15))
            message.responseCode = UInt8(int(0...15))
            for _ in 0..<int(0...4) {
                message.questions.append(
                    DNSQuestion(
                        name: try name(), type: DNSRecordType(rawValue: [12, 16, 33, 1, 28, 255][int(0...5)]),
                        unicastResponse: bool(), recordClass: recordClass()))
            }
            for _ in 0..<int(0...6) { message.answers.append(try record()) }
            for _ in 0..<int(0...3) { message.authorities.append(try record()) }
            for _ in 0..<int(0...6) { message.additionals.append(try record()) }
            return message
        }
    }

    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func randomMessagesRoundTrip(seed: UInt64) throws {
        var generator = Generator(random: SeededGenerator(seed: seed))
        for _ in 0..<500 {
            let message = try generator.message()
            let encoded = try message.encoded()
            let decoded = try DNSMessage.decode(encoded)
            #expect(decoded == message)
            // Deterministic, and a fixed point.
            #expect(try message.encoded() == encoded)
            #expect(try decoded.encoded() == encoded)
            // Every prefix is refused, without a trap.
            let all = bytes(of: encoded)
            for length in stride(from: 0, to: all.count, by: max(1, all.count / 40)) {
                #expect(decodeError(Array(all.prefix(length))) != nil)
            }
        }
    }

    @Test func compressionKeepsTheFirstSpelling() throws {
        let first = try DNSName("Peer._mpc._tcp.local")
        let second = try DNSName("peer._MPC._TCP.LOCAL")
        let message = DNSMessage(
            isResponse: true,
            answers: [
                DNSResourceRecord(name: first, ttl: 1, data: .a(1)),
                DNSResourceRecord(name: second, ttl: 1, data: .a(2)),
            ])
        let encoded = bytes(of: try message.encoded())
        // The second owner name, at offset 48, is one pointer to the first, at 12.
        #expect(encoded.count == 12 + 22 + 14 + 2 + 14)
        #expect(Array(encoded[48..<50]) == [0xC0, 0x0C])
        let decoded = try decode(encoded)
        #expect(decoded == message)
        #expect(decoded.answers[0].name.labels == first.labels)
        #expect(decoded.answers[1].name.labels == first.labels)
    }

    @Test func emptyTXTIsOneEmptyString() throws {
        let name = try DNSName("Peer._mpc._tcp.local")
        let message = DNSMessage(isResponse: true, answers: [DNSResourceRecord(name: name, ttl: 1, data: .txt([]))])
        let encoded = bytes(of: try message.encoded())
        #expect(Array(encoded.suffix(3)) == [0x00, 0x01, 0x00])  // rdlength 1, one empty string
        #expect(try decode(encoded) == message)
        // An empty rdata is read as the same thing (RFC 6763 §6.1).
        var empty = MessageBytes(answers: 1)
        empty.name("a.local")
        empty.recordTail(type: 16, rdata: [])
        #expect(try decode(empty.bytes).answers[0].data == .txt([]))
        // Two empty strings are kept as they are.
        var two = MessageBytes(answers: 1)
        two.name("a.local")
        two.recordTail(type: 16, rdata: [0, 0])
        #expect(try decode(two.bytes).answers[0].data == .txt([[], []]))
    }

    @Test func nsecBitmapsInEveryWindow() throws {
        let name = try DNSName("host.local")
        let types: Set<DNSRecordType> = [.a, .aaaa, .srv, DNSRecordType(rawValue: 0), DNSRecordType(rawValue: 255),
            DNSRecordType(rawValue: 256), DNSRecordType(rawValue: 4660), DNSRecordType(rawValue: 65535)]
        let message = DNSMessage(isResponse: true, answers: [DNSResourceRecord(name: name, ttl: 1, data: .nsec(next: name, types: types))])
        let encoded = bytes(of: try message.encoded())
        #expect(try decode(encoded) == message)
        // Window 0 needs all 32 bytes for type 255; window 1 one byte; 0x12 seven (0x34 / 8 + 1); 0xFF 32.
        #expect(encoded.count == 12 + 12 + 10 + 2 + (2 + 32) + (2 + 1) + (2 + 7) + (2 + 32))
        var empty = MessageBytes(answers: 1)
        empty.name("host.local")
        empty.recordTail(type: 47, rdata: [0xC0, 0x0C])
        #expect(try decode(empty.bytes).answers[0].data == .nsec(next: name, types: []))
    }

    @Test func unknownClassesAndTypesAreKept() throws {
        var message = MessageBytes(questions: 1, answers: 1)
        message.name("a.local")
        message.questionTail(type: 65280, qclass: 0xFFFF)
        message.pointer(to: 12)
        message.u16(99)
        message.u16(0x8042)
        message.u32(7)
        message.u16(3)
        message.raw([1, 2, 3])
        let decoded = try decode(message.bytes)
        #expect(decoded.questions[0].type.rawValue == 65280)
        #expect(decoded.questions[0].unicastResponse && decoded.questions[0].recordClass == 0x7FFF)
        #expect(decoded.answers[0].cacheFlush && decoded.answers[0].recordClass == 0x42)
        #expect(decoded.answers[0].type.rawValue == 99 && decoded.answers[0].data == .other([1, 2, 3]))
        #expect(bytes(of: try decoded.encoded()) == message.bytes)
    }
}
