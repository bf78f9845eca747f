@testable import MultipeerSession
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import MultipeerTestSupport
import MultipeerWire
import ProtocolTestSupport
import Testing
@testable import MultipeerProtocol

@Suite("Datagram batches for segmentation offload")
struct DatagramBatcherTests {
    static let alice = try! SocketAddress(ipAddress: "127.0.0.1", port: 4001)
    static let bob = try! SocketAddress(ipAddress: "127.0.0.1", port: 4002)
    static let carol = try! SocketAddress(ipAddress: "::1", port: 4001)

    /// A datagram whose bytes name its sequence number, so order and content can be checked.
    static func datagram(_ number: Int, size: Int) -> ByteBuffer {
        var buffer = ByteBuffer(repeating: UInt8(truncatingIfNeeded: number), count: size)
        buffer.setInteger(UInt32(number), at: 0)
        return buffer
    }

    /// What the kernel would put on the wire for a batch: its buffer cut at the segment size.
    static func wire(_ batch: DatagramBatcher.Batch) -> [ByteBuffer] {
        DatagramBatcher.segments(of: batch.buffer, segmentSize: batch.writtenSegmentSize)
    }

    @Test func equalDatagramsToOneAddressJoinUpToTheByteLimit() {
        var batcher = DatagramBatcher(maximumSegments: 64, maximumBytes: 32 * 1024)
        var closed: [DatagramBatcher.Batch] = []
        for number in 0..<60 {
            if let batch = batcher.add(Self.datagram(number, size: 1_236), to: Self.alice, segmentLimit: .max) { closed.append(batch) }
        }
        closed += batcher.takeAll()
        // 26 datagrams of 1,236 B fit in 32 KiB; 60 make batches of 26, 26 and 8.
        #expect(closed.map(\.count) == [26, 26, 8])
        #expect(closed.allSatisfy { $0.writtenSegmentSize == 1_236 && $0.buffer.readableBytes <= 32 * 1024 })
        #expect(closed.flatMap(Self.wire) == (0..<60).map { Self.datagram($0, size: 1_236) })
        #expect(batcher.heldBytes == 0)
    }

    @Test func smallDatagramsStopAtTheKernelsSegmentLimit() {
        var batcher = DatagramBatcher(maximumSegments: DatagramBatcher.kernelSegmentLimit, maximumBytes: 32 * 1024)
        var closed: [DatagramBatcher.Batch] = []
        for number in 0..<130 {
            if let batch = batcher.add(Self.datagram(number, size: 60), to: Self.alice, segmentLimit: .max) { closed.append(batch) }
        }
        closed += batcher.takeAll()
        #expect(closed.map(\.count) == [64, 64, 2])
        #expect(closed.flatMap(Self.wire) == (0..<130).map { Self.datagram($0, size: 60) })
    }

    @Test func aShorterDatagramEndsItsBatchAndALongerOneStartsANewOne() {
        var batcher = DatagramBatcher(maximumSegments: 64, maximumBytes: 32 * 1024)
        #expect(batcher.add(Self.datagram(0, size: 500), to: Self.alice, segmentLimit: .max) == nil)
        #expect(batcher.add(Self.datagram(1, size: 500), to: Self.alice, segmentLimit: .max) == nil)
        // Shorter: it may only be the last segment, so the batch closes with it.
        let shorter = batcher.add(Self.datagram(2, size: 300), to: Self.alice, segmentLimit: .max)
        #expect(shorter?.count == 3)
        #expect(shorter.map(Self.wire) == [Self.datagram(0, size: 500), Self.datagram(1, size: 500), Self.datagram(2, size: 300)])
        #expect(batcher.heldBytes == 0)
        #expect(batcher.add(Self.datagram(3, size: 400), to: Self.alice, segmentLimit: .max) == nil)
        // Longer: the open batch goes as it is (a lone datagram, written without a segment size).
        let longer = batcher.add(Self.datagram(4, size: 900), to: Self.alice, segmentLimit: .max)
        #expect(longer?.count == 1)
        #expect(longer?.writtenSegmentSize == nil)
        #expect(longer?.buffer == Self.datagram(3, size: 400))
        #expect(batcher.heldBytes == 900)
        #expect(batcher.takeAll().flatMap(Self.wire) == [Self.datagram(4, size: 900)])
    }

    /// A limit of 0 (offload off) sends every datagram alone; otherwise only datagrams up to the
    /// limit join (longer ones would be refused by a path with a smaller MTU), and never empty ones.
    @Test(arguments: [0, 100, 99])
    func onlyDatagramsWithinTheSegmentLimitJoin(limit: Int) {
        var batcher = DatagramBatcher(maximumBytes: 32 * 1024)
        var closed: [DatagramBatcher.Batch] = []
        for number in 0..<5 {
            if let batch = batcher.add(Self.datagram(number, size: 100), to: Self.alice, segmentLimit: limit) { closed.append(batch) }
        }
        closed += batcher.takeAll()
        #expect(closed.map(\.count) == (limit >= 100 ? [5] : [1, 1, 1, 1, 1]))
        #expect(closed.flatMap(Self.wire) == (0..<5).map { Self.datagram($0, size: 100) })
        var empties = DatagramBatcher(maximumBytes: 32 * 1024)
        for _ in 0..<3 { _ = empties.add(ByteBuffer(), to: Self.alice, segmentLimit: .max) }
        #expect(empties.takeAll().allSatisfy { $0.writtenSegmentSize == nil })
    }

    /// Random interleavings over three addresses: every batch keeps the kernel's rules, and each
    /// address receives exactly its datagrams in the order they were added.
    @Test func interleavedAddressesKeepEachAddresssOrder() {
        var random = SeededGenerator(seed: 0x5EED_0F_BA7C4)
        let addresses = [Self.alice, Self.bob, Self.carol]
        let sizes = [40, 1_236, 1_236, 1_236, 700, 8_192, 30_000]
        for round in 0..<200 {
            let maximumSegments = round % 5 == 0 ? 1 : Int(random.next() % 64) + 1
            let segmentLimit = round % 7 == 0 ? 1_236 : .max
            var batcher = DatagramBatcher(maximumSegments: maximumSegments, maximumBytes: 32 * 1024)
            var sent: [SocketAddress: [ByteBuffer]] = [:]
            var batches: [DatagramBatcher.Batch] = []
            var (sentBytes, batchedBytes) = (0, 0)
            for number in 0..<Int(random.next() % 300) {
                let address = addresses[Int(random.next() % 3)]
                let datagram = Self.datagram(number, size: sizes[Int(random.next() % UInt64(sizes.count))])
                sent[address, default: []].append(datagram)
                sentBytes += datagram.readableBytes
                var taken: [DatagramBatcher.Batch] = []
                if let batch = batcher.add(datagram, to: address, segmentLimit: segmentLimit) { taken.append(batch) }
                if random.next() % 50 == 0 { taken += batcher.takeAll() }
                batches += taken
                batchedBytes += taken.reduce(0) { $0 + $1.buffer.readableBytes }
                #expect(batcher.heldBytes == sentBytes - batchedBytes)
            }
            batches += batcher.takeAll()
            var received: [SocketAddress: [ByteBuffer]] = [:]
            for batch in batches {
                #expect(batch.count <= maximumSegments)
                #expect(batch.count == 1 || batch.segmentSize <= segmentLimit)
                #expect(batch.count == 1 || batch.buffer.readableBytes <= 32 * 1024)
                let segments = Self.wire(batch)
                #expect(segments.count == batch.count)
                #expect(segments.dropLast().allSatisfy { $0.readableBytes == batch.segmentSize })
                #expect((segments.last?.readableBytes ?? 0) <= batch.segmentSize)
                received[batch.address, default: []] += segments
            }
            #expect(received == sent, "round \(round)")
        }
    }

    @Test func joinedDatagramsAreCutAtTheReportedSize() {
        let joined = ByteBuffer(bytes: Array(0..<250).map(UInt8.init))
        #expect(DatagramBatcher.segments(of: joined, segmentSize: 100).map(\.readableBytes) == [100, 100, 50])
        #expect(DatagramBatcher.segments(of: joined, segmentSize: 125).map(\.readableBytes) == [125, 125])
        #expect(DatagramBatcher.segments(of: joined, segmentSize: 100).flatMap { Array($0.readableBytesView) } == Array(0..<250).map(UInt8.init))
        // No size, a nonsensical one, or one at least the whole: a single datagram.
        for size in [nil, 0, -3, 250, 4_000] as [Int?] {
            #expect(DatagramBatcher.segments(of: joined, segmentSize: size) == [joined])
        }
    }
}

@Suite("What the engine learns about segmentation offload")
struct DatagramSegmentationTests {
    @Test func loopbackAddressesAreRecognised() throws {
        for host in ["127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1"] {
            #expect(try SocketAddress(ipAddress: host, port: 1).isLoopback, "\(host)")
        }
        for host in ["10.0.0.1", "128.0.0.1", "::2", "fe80::1", "::ffff:10.0.0.1", "2001:db8::1"] {
            #expect(try !SocketAddress(ipAddress: host, port: 1).isLoopback, "\(host)")
        }
    }

    @Test func segmentsStayBelowAnEthernetMTUExceptOnLoopback() throws {
        let policy = DatagramSegmentation(enabled: true)
        #expect(policy.segmentLimit(for: try SocketAddress(ipAddress: "127.0.0.1", port: 1)) == WireLimits.maxUDPPayload)
        #expect(policy.segmentLimit(for: try SocketAddress(ipAddress: "192.168.1.2", port: 1)) == 1_452)
        #expect(DatagramSegmentation(enabled: false).segmentLimit(for: try SocketAddress(ipAddress: "127.0.0.1", port: 1)) == 0)
    }

    /// EMSGSIZE (SwiftNIO's `writeMessageTooLarge`): the datagrams go again singly, and no
    /// datagram that long joins a write again; the socket stayed open, so nothing counts as a refusal.
    /// Stands for a socket: one object per socket the engine binds.
    final class Socket {}
    static let socket = ObjectIdentifier(Socket.self)

    @Test func aWriteTooLargeForThePathLowersTheLimitAndIsResent() throws {
        var policy = DatagramSegmentation(enabled: true)
        #expect(policy.writeFailed(segmentSize: 1_236, error: ChannelError.writeMessageTooLarge, socket: Self.socket) == .resendSingly)
        #expect(policy.segmentLimit(for: try SocketAddress(ipAddress: "127.0.0.1", port: 1)) == 1_235)
        #expect(policy.writeFailed(segmentSize: 1_400, error: ChannelError.writeMessageTooLarge, socket: Self.socket) == .resendSingly)
        #expect(policy.largestSegment == 1_235)
        #expect(policy.enabled && policy.refusals == 0)
    }

    /// A refusal closes the socket and fails every pending write with it, so one refusal may be
    /// another write's error: segmenting stops at the second.
    /// Every write pending on a socket fails with its closing, so one socket counts once.
    @Test func theSecondRefusalTurnsSegmentingOff() {
        let (first, second) = (Socket(), Socket())
        var policy = DatagramSegmentation(enabled: true)
        for _ in 0..<3 {
            #expect(policy.writeFailed(segmentSize: 100, error: IOError(errnoCode: EINVAL, reason: "sendmmsg"), socket: ObjectIdentifier(first)) == .lost)
        }
        #expect(policy.enabled && policy.refusals == 1)
        #expect(policy.writeFailed(segmentSize: 100, error: IOError(errnoCode: EIO, reason: "sendmsg"), socket: ObjectIdentifier(second)) == .lost)
        #expect(!policy.enabled && policy.refusals == 2)
    }

    @Test func otherFailuresTeachNothing() {
        var policy = DatagramSegmentation(enabled: true)
        #expect(policy.writeFailed(segmentSize: 100, error: IOError(errnoCode: EPERM, reason: "sendmmsg"), socket: Self.socket) == .lost)
        #expect(policy.writeFailed(segmentSize: 100, error: ChannelError.ioOnClosedChannel, socket: Self.socket) == .lost)
        #expect(policy.enabled && policy.refusals == 0 && policy.largestSegment == WireLimits.maxUDPPayload)
    }
}
