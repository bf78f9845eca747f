import MultipeerWire
import NIOCore
import Testing

@Suite("Message fragmentation and reassembly (docs/PROTOCOL.md §6.4.8)")
struct MessageFragmentTests {
    @Test(arguments: [0, 1, 65_535, 65_536, 65_537, 200_000, WireLimits.maxMessageSize])
    func fragmentsReassembleToTheMessage(size: Int) throws {
        // Distinct markers every 4 KiB catch reordered or dropped fragments cheaply.
        var message = ByteBuffer(repeating: 0xAB, count: size)
        for offset in stride(from: 0, to: size, by: 4_096) {
            message.setInteger(UInt8(truncatingIfNeeded: offset / 4_096), at: offset)
        }
        let frames = try Frame.messageFragments(of: message)
        #expect(frames.count == max(1, (size + 65_535) / 65_536))
        var assembler = MessageAssembler()
        var result: ByteBuffer?
        for (index, frame) in frames.enumerated() {
            guard case .message(let payload, let isEnd) = frame else { Issue.record("not a message"); return }
            #expect(isEnd == (index == frames.count - 1))
            #expect(payload.readableBytes <= WireLimits.maxFramePayload)
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
}
