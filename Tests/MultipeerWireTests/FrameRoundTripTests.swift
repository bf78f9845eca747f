import MultipeerWire
import NIOCore
import Testing

@Suite("Frame round trips (property-based, seeded)")
struct FrameRoundTripTests {
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func randomFramesRoundTrip(seed: UInt64) throws {
        var random = RandomFrames(seed: seed)
        for _ in 0..<500 {
            let frame = random.frame()
            let bytes = try encoded(frame)
            #expect(bytes.count == WireLimits.frameHeaderLength + Int(bytes[8]) << 24 + Int(bytes[9]) << 16 + Int(bytes[10]) << 8 + Int(bytes[11]))
            let decoded = try Frame.decode(exactly: buffer(bytes))
            #expect(decoded == frame)
            // Canonical: re-encoding the decoded frame gives the very same bytes.
            #expect(try encoded(decoded) == bytes)
        }
    }

    @Test(arguments: [UInt64(10), 11, 12])
    func streamsOfFramesDecodeTheSameInAnySplit(seed: UInt64) throws {
        var random = RandomFrames(seed: seed)
        let (frames, stream) = try random.stream(of: 200)

        let allAtOnce = try decodeAll(stream, pieceSizes: [stream.count])
        #expect(allAtOnce == frames)
        let byteByByte = try decodeAll(stream, pieceSizes: [1])
        #expect(byteByByte == frames)
        let randomPieces = (0..<64).map { _ in random.int(1...5_000) }
        #expect(try decodeAll(stream, pieceSizes: randomPieces) == frames)
    }

    /// The pull interface (used to open TLS records straight into frame storage) decodes the same
    /// frames as the push interface, whatever sizes the source hands out.
    @Test(arguments: [UInt64(20), 21, 22])
    func pulledStreamsDecodeLikePushedOnes(seed: UInt64) throws {
        var random = RandomFrames(seed: seed)
        let (frames, stream) = try random.stream(of: 200)
        for maximumPiece in [1, 7, 16_384, stream.count] {
            var decoder = FrameDecoder()
            var offset = 0
            var decoded: [Frame] = []
            while decoded.count < frames.count {
                // Each round makes one piece available, then the source runs dry (returns 0),
                // like TLS waiting for its next record.
                var budget = random.int(1...maximumPiece)
                let before = offset
                while let frame = try decoder.nextFrame(pulling: { destination in
                    let count = min(destination.count, budget, stream.count - offset)
                    destination.copyBytes(from: stream[offset..<(offset + count)])
                    offset += count
                    budget -= count
                    return count
                }) {
                    decoded.append(frame)
                }
                if offset == stream.count && offset == before { break }
            }
            #expect(decoded == frames, "pieces of at most \(maximumPiece) bytes")
            #expect(decoder.bufferedByteCount == 0)
        }
    }

    /// A gathered payload owns storage of exactly its size: holding a frame never pins a larger
    /// buffer, and later input never has to copy around it.
    @Test func gatheredPayloadsOwnExactlySizedStorage() throws {
        let payload = ByteBuffer(repeating: 7, count: 50_000)
        let bytes = try encoded(.message(payload, isEnd: true))
        var decoder = FrameDecoder()
        var offset = 0
        let frame = try decoder.nextFrame { destination in
            let count = min(destination.count, 1_000, bytes.count - offset)
            destination.copyBytes(from: bytes[offset..<(offset + count)])
            offset += count
            return count
        }
        guard case .message(let received, isEnd: true) = frame else {
            Issue.record("expected a message, got \(String(describing: frame))")
            return
        }
        #expect(received == payload)
        #expect(received.capacity == payload.readableBytes)
    }

    @Test func encodingTheHeadLeavesTheBulkPayloadOut() throws {
        let payload = ByteBuffer(repeating: 9, count: 3_000)
        for frame in [Frame.message(payload, isEnd: false), .streamData(channel: 2, payload), .resourceChunk(channel: 1, payload)] {
            var whole = ByteBuffer()
            try frame.encode(into: &whole)
            var head = ByteBuffer()
            let bulk = try frame.encodeHead(into: &head)
            #expect(bulk == payload)
            #expect(head.readableBytes == WireLimits.frameHeaderLength)
            head.writeImmutableBuffer(payload)
            #expect(head == whole)
        }
        var ping = ByteBuffer()
        #expect(try Frame.ping(5).encodeHead(into: &ping) == nil)
        #expect(ping == buffer(try encoded(.ping(5))))
    }

    @Test func decoderHoldsNoMoreThanOneFrameOfUnconsumedInput() throws {
        var decoder = FrameDecoder()
        var random = RandomFrames(seed: 99)
        for _ in 0..<300 {
            let bytes = try encoded(random.frame())
            decoder.append(buffer(bytes))
            #expect(try decoder.nextFrame() != nil)
            #expect(decoder.bufferedByteCount == 0)
        }
    }

    @Test func decodedPayloadsShareNoStateWithLaterInput() throws {
        var decoder = FrameDecoder()
        decoder.append(buffer(try encoded(.message(buffer("first"), isEnd: true))))
        let first = try #require(try decoder.nextFrame())
        decoder.append(buffer(try encoded(.message(buffer("second"), isEnd: true))))
        _ = try decoder.nextFrame()
        #expect(first == .message(buffer("first"), isEnd: true))
    }

    @Test func encodingAFrameTheDecoderWouldRefuseThrowsAndWritesNothing() {
        let refused: [Frame] = [
            .message(ByteBuffer(repeating: 0, count: WireLimits.maxFramePayload + 1), isEnd: true),
            .streamData(channel: 1, ByteBuffer()),
            .streamData(channel: 0, buffer("x")),
            .resourceChunk(channel: 1, ByteBuffer()),
            .streamOpen(channel: 1, name: String(repeating: "x", count: 256)),
            .streamOpen(channel: 0, name: "x"),
            .windowUpdate(channel: 0, increment: 0),
            .windowUpdate(channel: 0, increment: WireLimits.maxWindow + 1),
            .resourceCancel(channel: 0, reason: .cancelled),
            .resourceAccept(channel: 0, offset: 0),
            .resourceReceived(channel: 0),
        ]
        for frame in refused {
            var out = ByteBuffer()
            #expect(throws: WireError.self) { try frame.encode(into: &out) }
            #expect(out.readableBytes == 0)
        }
    }

    /// Port 0 in a MESH_INTRODUCTION entry introduces a member that does not listen (§6.4.5);
    /// anywhere else an endpoint's port 0 is invalid (§9.2).
    @Test func aMemberThatDoesNotListenIsIntroducedWithPortZero() throws {
        let member = try WirePeerID(identifier: Bytes16(high: 1, low: 2), displayName: "member")
        let entry = MeshIntroduction.Entry(peerID: member, endpoint: .notListening(at: .ipv4(0x0A00_0002)))
        let frame = Frame.meshIntroduction(try MeshIntroduction(entries: [entry]))
        let bytes = try encoded(frame)
        #expect(bytes.suffix(2) == [0, 0])
        let decoded = try Frame.decode(exactly: buffer(bytes))
        #expect(decoded == frame)
        guard case .meshIntroduction(let introduction) = decoded else { return }
        #expect(!introduction.entries[0].endpoint.isListening)
        var standalone = ByteBuffer()
        entry.endpoint.encode(into: &standalone)
        #expect(throws: WireError.self) { try WireEndpoint.decode(from: &standalone) }
    }

    @Test func payloadValueTypesRefuseOutOfRangeValues() {
        #expect(throws: WireError.self) { try WirePeerID(identifier: .zero, displayName: "") }
        #expect(throws: WireError.self) { try WirePeerID(identifier: .zero, displayName: String(repeating: "é", count: 32)) }
        #expect(throws: WireError.self) { try Invitation(timeoutMilliseconds: 0, context: ByteBuffer()) }
        #expect(throws: WireError.self) { try Invitation(timeoutMilliseconds: 3_600_001, context: ByteBuffer()) }
        #expect(throws: WireError.self) {
            try Invitation(timeoutMilliseconds: 1, context: ByteBuffer(repeating: 0, count: WireLimits.maxInvitationContext + 1))
        }
        #expect(throws: WireError.self) { try MeshIntroduction(entries: []) }
        #expect(throws: WireError.self) {
            try MeshIntroduction(entries: Array(repeating: .init(peerID: alice, endpoint: try WireEndpoint(address: .ipv4(1), port: 1)), count: 7))
        }
        #expect(throws: WireError.self) { try ResourceOffer(size: WireLimits.maxResourceSize + 1, transferID: .zero, name: "") }
        #expect(throws: WireError.self) { try WireEndpoint(address: .ipv4(1), port: 0) }
        #expect(throws: WireError.self) {
            try Hello(purpose: .answer, preambleEcho: .zero, token: Bytes16(high: 0, low: 1), listenPort: 0, datagramPort: 0, datagramReceiverID: 0, peerID: alice)
        }
        #expect(throws: WireError.self) {
            try Hello(purpose: .answer, preambleEcho: .zero, listenPort: 0, datagramPort: 1, datagramReceiverID: 0, peerID: alice)
        }
        #expect(throws: WireError.self) { try SHA256Digest(bytes: [UInt8](repeating: 0, count: 31)) }
    }
}
