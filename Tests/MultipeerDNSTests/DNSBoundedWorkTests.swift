import NIOCore
import Testing

@testable import MultipeerDNS

/// A 9,000-byte message as full of compression pointers as the limits allow: every name
/// is 64 hops and 64 labels deep, and decoding still does work linear in the number of names.
@Suite("DNS decoding work is bounded")
struct DNSBoundedWorkTests {
    /// One raw record holding a chain of nodes, each the label "x" then a pointer to the node
    /// before; then PTR records whose owner and target both point at the last node.
    static func pointerHeavyMessage() -> (bytes: [UInt8], names: Int) {
        let perSection = DNSLimits.maxRecordsPerSection
        var records: [[UInt8]] = []
        var chain = MessageBytes()  // only for its helpers; the header is dropped below
        chain.bytes = []
        chain.u8(0)  // owner: root
        let start = 12 + 1 + 10
        var rdata: [UInt8] = [1, 0x78, 0]
        var last = start
        for _ in 0..<(DNSLimits.maxPointerHops - 1) {
            let here = start + rdata.count
            rdata += [1, 0x78, 0xC0 | UInt8(last >> 8), UInt8(last & 0xFF)]
            last = here
        }
        chain.recordTail(type: 99, rdata: rdata)
        records.append(chain.bytes)

        let pointer: [UInt8] = [0xC0 | UInt8(last >> 8), UInt8(last & 0xFF)]
        var size = 12 + chain.count
        var names = 1
        let ptrRecord = pointer + [0, 12, 0, 1, 0, 0, 0, 120, 0, 2] + pointer
        while records.count < 3 * perSection - 1, size + ptrRecord.count + 12 <= DNSLimits.maxMessageSize {
            records.append(ptrRecord)
            size += ptrRecord.count
            names += 2
        }
        // The last record pads the message to exactly the limit.
        var padding = MessageBytes()
        padding.bytes = pointer
        padding.recordTail(type: 99, rdata: [UInt8](repeating: 0, count: DNSLimits.maxMessageSize - size - 12))
        records.append(padding.bytes)
        names += 1

        let answers = min(records.count, perSection)
        let authorities = min(records.count - answers, perSection)
        var message = MessageBytes(
            answers: answers, authorities: authorities, additionals: records.count - answers - authorities)
        for record in records { message.raw(record) }
        return (message.bytes, names)
    }

    @Test func pointerHeavyMessageDecodesInBoundedSteps() throws {
        let (bytes, names) = Self.pointerHeavyMessage()
        #expect(bytes.count == DNSLimits.maxMessageSize)
        var steps = 0
        let message = try DNSMessage.decode(ByteBuffer(bytes: bytes), steps: &steps)
        let deep = try DNSName(labels: Array(repeating: [0x78], count: DNSLimits.maxPointerHops))
        #expect(message.answers.count + message.authorities.count + message.additionals.count > 600)
        #expect(message.answers[1].name == deep)
        #expect(message.answers[1].data == .ptr(deep))
        // Each name: at most 127 labels, 64 pointers and the final zero.
        #expect(steps <= names * (127 + DNSLimits.maxPointerHops + 1))
        #expect(steps >= names * DNSLimits.maxPointerHops)
    }

    @Test func worstCaseLoopsAreRefusedQuickly() {
        // Every name a pointer to the one before it: the first pointer that does not go back fails.
        var message = MessageBytes(questions: 256)
        for index in 0..<256 {
            message.pointer(to: 12 + index * 6)
            message.questionTail()
        }
        #expect(decodeError(message.bytes)?.code == .badPointer)
    }
}
