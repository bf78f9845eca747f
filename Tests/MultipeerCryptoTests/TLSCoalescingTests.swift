@testable import MultipeerCrypto
import MultipeerTestSupport
import NIOCore
import Testing

/// The lengths of the TLS records in `wire`; fails the test when they do not parse.
func recordLengths(_ wire: ByteBuffer, sourceLocation: SourceLocation = #_sourceLocation) -> [Int] {
    let lengths = TLSRecords.lengths(in: [wire])
    #expect(lengths != nil, "not whole application-data records", sourceLocation: sourceLocation)
    return lengths ?? []
}

@Suite("TLS engine: small frames share records")
struct TLSCoalescingTests {
    let pki: TestPKI
    init() throws { pki = try TestPKI() }

    func frame(_ index: Int, payload: Int) -> (head: ByteBuffer, body: ByteBuffer) {
        var head = ByteBuffer()
        head.writeInteger(UInt32(index))
        head.writeRepeatingByte(0xAA, count: 8)
        return (head, ByteBuffer(repeating: UInt8(truncatingIfNeeded: index), count: payload))
    }

    @Test func aBurstOfSmallFramesIsSealedAsOneRecord() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        var expected: [UInt8] = []
        for index in 0..<100 {
            let (head, body) = frame(index, payload: 64)
            expected += Array(head.readableBytesView) + Array(body.readableBytesView)
            try pair.client.write(head: head, body: body, coalescing: true)
        }
        #expect(pair.client.takeOutbound() == nil)
        #expect(pair.client.heldByteCount == 100 * 76)
        try pair.client.sealHeld()
        let wire = try #require(pair.client.takeOutbound())
        #expect(recordLengths(wire) == [100 * 76 + 17])
        pair.server.receive(wire)
        #expect(try pair.read(pair.server) == expected)
    }

    /// Any mix of held and immediate writes of any size arrives in order, and no record carries
    /// more than TLS allows.
    @Test(arguments: [1, 2, 3, 4, 5])
    func heldAndImmediateWritesStayInOrder(seed: UInt64) throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        var random = SeededGenerator(seed: seed)
        var expected: [UInt8] = []
        var received: [UInt8] = []
        var records: [Int] = []
        for index in 0..<300 {
            let payload = Int.random(in: 0..<8, using: &random) == 0 ? Int.random(in: 0..<40_000, using: &random) : Int.random(in: 0..<300, using: &random)
            let (head, body) = frame(index, payload: payload)
            expected += Array(head.readableBytesView) + Array(body.readableBytesView)
            try pair.client.write(head: head, body: body, coalescing: Int.random(in: 0..<4, using: &random) != 0)
            if Int.random(in: 0..<10, using: &random) == 0 { try pair.client.sealHeld() }
            if Int.random(in: 0..<5, using: &random) == 0, let wire = pair.client.takeOutbound() {
                records += recordLengths(wire)
                pair.server.receive(wire)
                received += try pair.read(pair.server)
            }
        }
        try pair.client.sealHeld()
        #expect(pair.client.heldByteCount == 0)
        if let wire = pair.client.takeOutbound() {
            records += recordLengths(wire)
            pair.server.receive(wire)
        }
        received += try pair.read(pair.server)
        #expect(received == expected)
        #expect(records.allSatisfy { $0 <= TLSEngine.maximumRecordPlaintext + 17 })
    }

    @Test func anImmediateWriteSealsWhatIsHeldFirst() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        try pair.client.write(head: ByteBuffer(string: "first "), body: ByteBuffer(), coalescing: true)
        try pair.client.write(ByteBuffer(string: "second"))
        #expect(pair.client.heldByteCount == 0)
        let wire = try #require(pair.client.takeOutbound())
        #expect(recordLengths(wire).count == 2)
        pair.server.receive(wire)
        #expect(try pair.read(pair.server) == Array("first second".utf8))
    }

    @Test func closingSendsHeldFramesBeforeCloseNotify() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: try pki.peer("bob"))
        try pair.handshake()
        try pair.client.write(head: ByteBuffer(string: "last words"), body: ByteBuffer(), coalescing: true)
        pair.client.close()
        pair.pump()
        #expect(try pair.read(pair.server) == Array("last words".utf8))
        #expect(try pair.server.readPlaintext() == .closed)
    }

    /// Held frames are sealed through the same record count, so KeyUpdates still come on time.
    @Test func keyUpdatesCountSharedRecords() throws {
        let pair = try EnginePair(clientIdentity: nil, serverIdentity: nil, recordsPerKeyUpdate: 2)
        try pair.handshake()
        for burst in 0..<7 {
            for index in 0..<10 {
                let (head, body) = frame(burst * 10 + index, payload: 100)
                try pair.client.write(head: head, body: body, coalescing: true)
            }
            try pair.client.sealHeld()
            pair.pump()
            #expect(try pair.read(pair.server).count == 10 * 112)
        }
        // Seven records, two per key: KeyUpdates before records 3, 5 and 7.
        #expect(pair.client.keyUpdatesInitiated == 3)
    }
}
