import MultipeerWire
import NIOCore
import Testing

@Suite("Message fragmentation and reassembly (docs/PROTOCOL.md §6.4.8)")
struct MessageFragmentTests {
    @Test(arguments: [0, 1, 65_523, 65_524, 65_525, 65_536, 65_537, 200_000, WireLimits.maxMessageSize])
    func fragmentsReassembleToTheMessage(size: Int) throws {
        // Distinct markers every 4 KiB catch reordered or dropped fragments cheaply.
        var message = ByteBuffer(repeating: 0xAB, count: size)
        for offset in stride(from: 0, to: size, by: 4_096) {
            message.setInteger(UInt8(truncatingIfNeeded: offset / 4_096), at: offset)
        }
        let frames = try Frame.messageFragments(of: message)
        #expect(frames.count == max(1, (size + Frame.largestSentPayload - 1) / Frame.largestSentPayload))
        var assembler = MessageAssembler()
        var result: ByteBuffer?
        for (index, frame) in frames.enumerated() {
            guard case .message(let payload, let isEnd) = frame else { Issue.record("not a message"); return }
            #expect(isEnd == (index == frames.count - 1))
            // Each frame but the last is 64 KiB with its header: four whole 16 KiB TLS records.
            if isEnd {
                #expect(payload.readableBytes <= Frame.largestSentPayload)
            } else {
                #expect(payload.readableBytes + WireLimits.frameHeaderLength == 4 * 16_384)
            }
            result = try assembler.append(payload, isEnd: isEnd)
            #expect((result != nil) == isEnd)
        }
        #expect(result == message)
        #expect(assembler.bufferedByteCount == 0)
    }

    @Test func oversizedMessagesAreRefusedOnBothSides() throws {
        let tooBig = ByteBuffer(repeating: 0, count: WireLimits.maxMessageSize + 1)
        #expect(throws: WireError.self) { try Frame.messageFragments(of: tooBig) }
        var assembler = MessageAssembler()
        let chunk = ByteBuffer(repeating: 1, count: WireLimits.maxFramePayload)
        for _ in 0..<(WireLimits.maxMessageSize / WireLimits.maxFramePayload) {
            #expect(try assembler.append(chunk, isEnd: false) == nil)
        }
        do {
            _ = try assembler.append(ByteBuffer(bytes: [1]), isEnd: true)
            Issue.record("a message over the limit was assembled")
        } catch {
            #expect(error.code == .limitExceeded)
            #expect(error.goodbyeReason == .limitExceeded)
        }
    }

    @Test func fragmentsOfAnyCutJoin() throws {
        var assembler = MessageAssembler()
        #expect(try assembler.append(ByteBuffer(string: "hel"), isEnd: false) == nil)
        #expect(try assembler.append(ByteBuffer(), isEnd: false) == nil)
        #expect(try assembler.append(ByteBuffer(string: "lo"), isEnd: true) == ByteBuffer(string: "hello"))
        #expect(try assembler.append(ByteBuffer(), isEnd: true) == ByteBuffer())
    }

    /// Attack: a flood of empty fragments without END held a buffer entry each, without limit.
    @Test func emptyFragmentsHoldNothing() throws {
        var assembler = MessageAssembler()
        for _ in 0..<300_000 { _ = try assembler.append(ByteBuffer(), isEnd: false) }
        #expect(assembler.heldBufferCount == 0)
        #expect(assembler.retainedByteCount == 0)
        #expect(try assembler.append(ByteBuffer(string: "x"), isEnd: true) == ByteBuffer(string: "x"))
    }

    /// Attack: a 16 MiB message in 1-byte fragments cost about 2.2 GB of bookkeeping.
    @Test func tinyFragmentsCostTheirBytesNotTheirCount() throws {
        var assembler = MessageAssembler()
        let count = 300_000
        for index in 0..<count {
            _ = try assembler.append(ByteBuffer(bytes: [UInt8(truncatingIfNeeded: index)]), isEnd: false)
        }
        #expect(assembler.heldBufferCount == 1)
        #expect(assembler.bufferedByteCount == count)
        #expect(assembler.retainedByteCount <= 2 * count + 4_096)
        let message = try #require(try assembler.append(ByteBuffer(), isEnd: true))
        #expect(message.readableBytes == count)
        #expect(message.getInteger(at: 200_001, as: UInt8.self) == UInt8(truncatingIfNeeded: 200_001))
        #expect(assembler.heldBufferCount == 0)
    }

    /// Alternating small and slice-sized fragments: held buffers stay bounded by the message limit.
    @Test func alternatingFragmentSizesStayBounded() throws {
        var assembler = MessageAssembler()
        let large = ByteBuffer(repeating: 7, count: MessageAssembler.sliceThreshold)
        var sent = 0
        while sent + large.readableBytes + 1 <= WireLimits.maxMessageSize {
            _ = try assembler.append(ByteBuffer(bytes: [1]), isEnd: false)
            _ = try assembler.append(large, isEnd: false)
            sent += large.readableBytes + 1
        }
        #expect(assembler.heldBufferCount <= 2 * WireLimits.maxMessageSize / MessageAssembler.sliceThreshold)
        #expect(assembler.retainedByteCount <= sent + assembler.heldBufferCount * 512)
        #expect(throws: WireError.self) { try assembler.append(large, isEnd: true) }
    }
}
