import MultipeerWire
import NIOCore
import Testing

@Suite("Frame limits and malformed input (docs/PROTOCOL.md §6, §10)")
struct FrameLimitTests {
    private func expectError(_ code: WireError.Code, _ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        var decoder = FrameDecoder()
        decoder.append(buffer(bytes))
        do {
            let frame = try decoder.nextFrame()
            Issue.record("expected \(code), decoded \(String(describing: frame))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
            // The decoder stays failed: no later input can revive it.
            decoder.append(buffer(try! encoded(.ping(1))))
            #expect(throws: error) { try decoder.nextFrame() }
        }
    }

    @Test(arguments: FrameType.allCases)
    func boundsAreExactAndTight(type: FrameType) throws {
        let bounds = type.payloadLengths
        let smallest = try encoded(FrameBounds.smallest(type))
        let largest = try encoded(FrameBounds.largest(type))
        #expect(smallest.count - WireLimits.frameHeaderLength == bounds.lowerBound)
        #expect(largest.count - WireLimits.frameHeaderLength == bounds.upperBound)
        #expect(try Frame.decode(exactly: buffer(smallest)) == FrameBounds.smallest(type))
        #expect(try Frame.decode(exactly: buffer(largest)) == FrameBounds.largest(type))
    }

    /// Length 0, min-1, max+1, 65,537 and 2^32-1: refused from the 12 header bytes alone.
    @Test(arguments: FrameType.allCases)
    func lengthsOutsideTheBoundsAreRefusedFromTheHeaderAlone(type: FrameType) {
        let bounds = type.payloadLengths
        let channel: UInt32 = type.channelRule == .connection ? 0 : 1
        let flags: UInt8 = type == .message ? FrameFlags.endOfMessage : 0
        var outside: [UInt32] = [UInt32(bounds.upperBound + 1), 65_537, UInt32.max, UInt32.max - 1]
        if bounds.lowerBound > 0 { outside += [0, UInt32(bounds.lowerBound - 1)] }
        for length in outside {
            expectError(.invalidLength, rawHeader(type: type.rawValue, flags: flags, channel: channel, length: length))
        }
    }

    /// Lengths inside the bounds wait for the payload; nothing is decoded early.
    @Test(arguments: FrameType.allCases)
    func lengthsInsideTheBoundsWaitForThePayload(type: FrameType) throws {
        let bounds = type.payloadLengths
        let channel: UInt32 = type.channelRule == .connection ? 0 : 1
        for length in Set([bounds.lowerBound, bounds.upperBound]) where length > 0 {
            var decoder = FrameDecoder()
            decoder.append(buffer(rawHeader(type: type.rawValue, channel: channel, length: UInt32(length))))
            #expect(try decoder.nextFrame() == nil)
            #expect(decoder.bufferedByteCount == 0)
            decoder.append(buffer([UInt8](repeating: 0, count: length - 1)))
            #expect(try decoder.nextFrame() == nil)
        }
    }

    /// Announcing a large frame and sending a byte pins 16 KiB, not the announced length; the
    /// storage grows to the exact length only once 16 KiB have arrived.
    @Test func aLargeAnnouncedPayloadReservesLittleUntilItArrives() throws {
        var decoder = FrameDecoder()
        var source = buffer(rawHeader(type: FrameType.message.rawValue, flags: FrameFlags.endOfMessage, length: 65_536) + [7])
        func feed(_ bytes: inout ByteBuffer, _ decoder: inout FrameDecoder) throws -> Frame? {
            try decoder.nextFrame { destination in
                let count = min(destination.count, bytes.readableBytes)
                bytes.readWithUnsafeReadableBytes { raw in
                    destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[..<count]))
                    return count
                }
                return count
            }
        }
        #expect(try feed(&source, &decoder) == nil)
        #expect(decoder.reservedPayloadCapacity == 16_384)
        var more = ByteBuffer(repeating: 7, count: 16_382)
        #expect(try feed(&more, &decoder) == nil)
        #expect(decoder.reservedPayloadCapacity == 16_384)
        var oneMore = ByteBuffer(repeating: 7, count: 1)
        #expect(try feed(&oneMore, &decoder) == nil)
        #expect(decoder.reservedPayloadCapacity == 65_536)
        var rest = ByteBuffer(repeating: 7, count: 65_536 - 16_384)
        let frame = try feed(&rest, &decoder)
        #expect(frame == .message(ByteBuffer(repeating: 7, count: 65_536), isEnd: true))
        #expect(decoder.reservedPayloadCapacity == 0)
    }

    /// Once 16 KiB of a frame are in (its header and what the source holds), the payload's
    /// storage is its exact length at once, so it is never grown and copied; below that, 16 KiB.
    @Test(arguments: [(16_371, false), (16_372, true)])
    func aPayloadIsSizedExactlyOnceSixteenKiBOfItsFrameAreIn(held: Int, exact: Bool) throws {
        // The allocator rounds up to a power of two: room for the whole payload, in one step.
        func expectReserved(_ capacity: Int, sourceLocation: SourceLocation = #_sourceLocation) {
            if exact {
                #expect(capacity >= 65_524 && capacity <= 65_536, sourceLocation: sourceLocation)
            } else {
                #expect(capacity == 16_384, sourceLocation: sourceLocation)
            }
        }
        let header = rawHeader(type: FrameType.message.rawValue, flags: FrameFlags.endOfMessage, length: 65_524)
        // Pulled: the source says what it holds.
        var source = buffer(header + [UInt8](repeating: 7, count: held))
        var pulled = FrameDecoder()
        let frame = try pulled.nextFrame(
            pulling: { destination in
                let count = min(destination.count, source.readableBytes)
                source.readWithUnsafeReadableBytes { raw in
                    destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[..<count]))
                    return count
                }
                return count
            },
            onHand: source.readableBytes)
        #expect(frame == nil)
        expectReserved(pulled.reservedPayloadCapacity)
        // Appended: what is pending counts.
        var appended = FrameDecoder()
        appended.append(buffer(header + [UInt8](repeating: 7, count: held)))
        #expect(try appended.nextFrame() == nil)
        expectReserved(appended.reservedPayloadCapacity)
    }

    @Test func unknownTypesAreRefused() {
        let known = Set(FrameType.allCases.map(\.rawValue))
        for raw in UInt8.min...UInt8.max where !known.contains(raw) {
            expectError(.unknownFrameType, rawHeader(type: raw, length: 0))
        }
    }

    @Test(arguments: FrameType.allCases)
    func undefinedFlagsAreRefused(type: FrameType) {
        let channel: UInt32 = type.channelRule == .connection ? 0 : 1
        for bit in 0..<8 where type.allowedFlags & (1 << bit) == 0 {
            expectError(.disallowedFlags, rawHeader(type: type.rawValue, flags: 1 << bit, channel: channel, length: UInt32(type.payloadLengths.lowerBound)))
        }
    }

    @Test(arguments: FrameType.allCases)
    func reservedHeaderBitsAreRefused(type: FrameType) {
        let channel: UInt32 = type.channelRule == .connection ? 0 : 1
        for reserved: UInt16 in [1, 0x8000, .max] {
            expectError(.nonZeroReserved, rawHeader(type: type.rawValue, reserved: reserved, channel: channel, length: UInt32(type.payloadLengths.lowerBound)))
        }
    }

    @Test(arguments: FrameType.allCases)
    func channelKindIsEnforced(type: FrameType) {
        let length = UInt32(type.payloadLengths.lowerBound)
        switch type.channelRule {
        case .connection:
            expectError(.invalidChannel, rawHeader(type: type.rawValue, channel: 1, length: length))
            expectError(.invalidChannel, rawHeader(type: type.rawValue, channel: .max, length: length))
        case .channel:
            expectError(.invalidChannel, rawHeader(type: type.rawValue, channel: 0, length: length))
        case .any:
            #expect(throws: Never.self) { try Frame.decode(exactly: buffer(rawHeader(type: type.rawValue, channel: 7, length: 4) + [0, 0, 0, 1])) }
        }
    }

    @Test func invalidEnumValuesInPayloadsAreRefused() {
        for value: UInt8 in [0, 4, 0xFF] {
            expectError(.invalidValue, rawHeader(type: FrameType.trust.rawValue, length: 1) + [value])
        }
        for value: UInt8 in [0, 6, 0xFF] {
            expectError(.invalidValue, rawHeader(type: FrameType.invitationResponse.rawValue, length: 1) + [value])
        }
        // An acceptance carries connection data; other answers carry nothing more.
        #expect(throws: WireError.self) { try Frame.decode(exactly: buffer(rawHeader(type: FrameType.invitationResponse.rawValue, length: 1) + [1])) }
        #expect(throws: WireError.self) { try Frame.decode(exactly: buffer(rawHeader(type: FrameType.invitationResponse.rawValue, length: 3) + [2, 0, 0])) }
        // WINDOW_UPDATE increments 0 and above 2^31-1.
        expectError(.invalidValue, rawHeader(type: FrameType.windowUpdate.rawValue, length: 4) + [0, 0, 0, 0])
        expectError(.invalidValue, rawHeader(type: FrameType.windowUpdate.rawValue, length: 4) + [0x80, 0, 0, 0])
        // Invitation timeouts 0 and above an hour.
        expectError(.invalidValue, rawHeader(type: FrameType.invitation.rawValue, length: 6) + [0, 0, 0, 0, 0, 0])
        expectError(.invalidValue, rawHeader(type: FrameType.invitation.rawValue, length: 6) + [0, 0x36, 0xEE, 0x81, 0, 0])
    }

    @Test func helloFieldRulesAreEnforced() throws {
        let valid = try encoded(FrameBounds.smallest(.hello))
        var badPurpose = valid
        badPurpose[12 + 1] = 5
        expectError(.invalidValue, badPurpose)
        var reserved = valid
        reserved[12 + 3] = 1
        expectError(.nonZeroReserved, reserved)
        var tokenOnAnswer = valid
        tokenOnAnswer[12 + 20 + 15] = 1
        expectError(.invalidValue, tokenOnAnswer)
        var portWithoutReceiverID = valid
        portWithoutReceiverID[12 + 38 + 1] = 1
        expectError(.invalidValue, portWithoutReceiverID)
        var peerVersion = valid
        peerVersion[12 + 44] = 2
        expectError(.unsupportedVersion, peerVersion)
    }

    @Test func stringsMustBeWellFormedUTF8() {
        for bad: [UInt8] in [[0xFF], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xE2, 0x82], [0xF4, 0x90, 0x80, 0x80]] {
            let payload = [UInt8(bad.count)] + bad
            expectError(.invalidUTF8, rawHeader(type: FrameType.streamOpen.rawValue, channel: 1, length: UInt32(payload.count)) + payload)
        }
    }

    @Test func innerLengthsMustMatchThePayload() {
        // A string whose count runs past the payload: truncated.
        expectError(.truncated, rawHeader(type: FrameType.streamOpen.rawValue, channel: 1, length: 3) + [5, 0x61, 0x62])
        // A string shorter than the payload: trailing bytes.
        expectError(.trailingBytes, rawHeader(type: FrameType.streamOpen.rawValue, channel: 1, length: 3) + [1, 0x61, 0x62])
        // Invitation context count beyond the limit, though the frame is in bounds.
        expectError(.invalidLength, rawHeader(type: FrameType.invitation.rawValue, length: 6) + [0, 0, 0, 1, 0x10, 0x01])
        // Mesh introduction that claims more entries than fit.
        var mesh = (try? encoded(FrameBounds.smallest(.meshIntroduction))) ?? []
        mesh[12] = 2
        expectError(.truncated, mesh)
        mesh[12] = 7
        expectError(.limitExceeded, mesh)
        mesh[12] = 0
        expectError(.invalidValue, mesh)
    }

    @Test func aFrameCutShortIsNotDecoded() throws {
        let bytes = try encoded(FrameBounds.largest(.meshIntroduction))
        #expect(throws: WireError.self) { try Frame.decode(exactly: buffer(Array(bytes.dropLast()))) }
        #expect(throws: WireError.self) { try Frame.decode(exactly: buffer(bytes + [0])) }
    }

    @Test func wireErrorsMapToGoodbyeReasons() {
        #expect(WireError(.limitExceeded, "x").goodbyeReason == .limitExceeded)
        #expect(WireError(.invalidLength, "x").goodbyeReason == .protocolError)
        #expect(WireError(.unknownFrameType, "x").goodbyeReason == .protocolError)
        #expect(GoodbyeReason(rawValue: 4).description == "downgradeDetected")
        #expect(GoodbyeReason(rawValue: 999).description == "other(999)")
    }
}
