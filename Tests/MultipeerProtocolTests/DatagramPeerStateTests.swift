import MultipeerCrypto
import MultipeerWire
import NIOCore
import ProtocolTestSupport
import Testing
import MultipeerProtocol

/// Keys both ends derive alike, as the TLS exporter would give them.
final class SharedKeys {
    private var keys: [String: SecureBytes] = [:]
    func key(_ direction: DatagramDirection, _ epoch: UInt32) -> SecureBytes? {
        let name = "\(direction)-\(epoch)"
        if let key = keys[name] { return key }
        let key = SecureBytes(randomCount: DatagramCipher.keyLength)
        keys[name] = key
        return key
    }

    /// Derivations asked for through `countedKey` (one side's), so a test can count them.
    var derivations = 0
    func countedKey(_ direction: DatagramDirection, _ epoch: UInt32) -> SecureBytes? {
        derivations += 1
        return key(direction, epoch)
    }
}

@Suite("Datagram state: sealing, replay, epochs (docs/PROTOCOL.md §8)")
struct DatagramPeerStateTests {
    static func pair(encrypted: Bool = true, limits: DatagramPeerState.Limits = .init()) -> (DatagramPeerState, DatagramPeerState) {
        let keys = SharedKeys()
        let dialer = DatagramPeerState(isEncrypted: encrypted, weAreDialer: true, peerReceiverID: 22, limits: limits, keySource: keys.key)
        let listener = DatagramPeerState(isEncrypted: encrypted, weAreDialer: false, peerReceiverID: 11, limits: limits, keySource: keys.key)
        return (dialer, listener)
    }

    /// A sealed datagram with a well-formed header and a body no key opens.
    static func forged(receiverID: UInt32, epoch: UInt32, counter: UInt64) -> ByteBuffer {
        var bytes = ByteBuffer()
        DatagramHeader(kind: .sealed, receiverID: receiverID, epoch: epoch, counter: counter).encode(into: &bytes)
        bytes.writeRepeatingByte(0xEE, count: 40)
        return bytes
    }

    static func deliver(_ datagram: ByteBuffer, to state: inout DatagramPeerState) -> DatagramPeerState.Received {
        guard let (header, body) = try? DatagramHeader.decode(datagram: datagram) else { return .dropped }
        return state.open(header: header, body: body)
    }

    @Test func sealedDatagramsArriveAndNeverInClear() throws {
        var (dialer, listener) = Self.pair()
        let datagram = try sealed(&dialer, ByteBuffer(string: "position 12,7"))
        #expect(!String(decoding: datagram.readableBytesView, as: UTF8.self).contains("position"))
        #expect(datagram.readableBytes == 20 + 13 + 16)
        #expect(Self.deliver(datagram, to: &listener) == .message(ByteBuffer(string: "position 12,7")))
        // And back the other way, with the other direction's key.
        let reply = try sealed(&listener, ByteBuffer(string: "ack"))
        #expect(Self.deliver(reply, to: &dialer) == .message(ByteBuffer(string: "ack")))
        // A datagram cannot be reflected back to its sender: the directions have different keys.
        var reflected = dialer
        #expect(Self.deliver(datagram, to: &reflected) == .dropped)
    }

    @Test func replaysAreDroppedAndReorderingIsAccepted() throws {
        var (dialer, listener) = Self.pair()
        let datagrams = (0..<100).map { dialer.seal(ByteBuffer(string: "\($0)"))! }
        for datagram in datagrams.reversed() { #expect(Self.deliver(datagram, to: &listener) != .dropped) }
        for datagram in datagrams { #expect(Self.deliver(datagram, to: &listener) == .dropped) }
    }

    @Test func forgedTruncatedAndWrongKindDatagramsChangeNothing() throws {
        var (dialer, listener) = Self.pair()
        let genuine = try sealed(&dialer, ByteBuffer(string: "genuine"))
        var forged = Array(genuine.readableBytesView)
        forged[forged.count - 1] ^= 1
        #expect(Self.deliver(ByteBuffer(bytes: forged), to: &listener) == .dropped)
        var headerForged = Array(genuine.readableBytesView)
        headerForged[19] ^= 1  // counter changed: the header is authenticated too
        #expect(Self.deliver(ByteBuffer(bytes: headerForged), to: &listener) == .dropped)
        #expect(Self.deliver(ByteBuffer(bytes: Array(genuine.readableBytesView.prefix(30))), to: &listener) == .dropped)
        // A forgery far ahead must not block the genuine datagram that follows.
        var ahead = DatagramHeader(kind: .sealed, receiverID: 22, epoch: 0, counter: 1 << 40)
        var aheadBytes = ByteBuffer()
        ahead.encode(into: &aheadBytes)
        aheadBytes.writeRepeatingByte(0, count: 32)
        #expect(Self.deliver(aheadBytes, to: &listener) == .dropped)
        ahead = DatagramHeader(kind: .plain, receiverID: 22, epoch: 0, counter: 0)
        var plainBytes = ByteBuffer()
        ahead.encode(into: &plainBytes)
        plainBytes.writeString("unauthenticated")
        #expect(Self.deliver(plainBytes, to: &listener) == .dropped)
        #expect(Self.deliver(genuine, to: &listener) == .message(ByteBuffer(string: "genuine")))
    }

    @Test func epochsRollOverAtTheInjectedLimitAndLateDatagramsOfTheLastEpochStillCount() throws {
        var limits = DatagramPeerState.Limits()
        limits.epochCounterLimit = 4
        var (dialer, listener) = Self.pair(limits: limits)
        var epochs: [UInt32] = []
        var received = 0
        var held: ByteBuffer?
        for index in 0..<40 {
            let datagram = try sealed(&dialer, ByteBuffer(string: "\(index)"))
            epochs.append(try DatagramHeader.decode(datagram: datagram).header.epoch)
            if index == 6 { held = datagram; continue }  // epoch 1, delivered late
            if case .message = Self.deliver(datagram, to: &listener) { received += 1 }
            if index == 9, let late = held {  // now in epoch 2: epoch 1 is still accepted
                if case .message = Self.deliver(late, to: &listener) { received += 1 }
            }
        }
        #expect(epochs == (0..<40).map { UInt32($0 / 4) })
        #expect(received == 40)
        // Two epochs back is gone.
        var old = DatagramHeader(kind: .sealed, receiverID: 22, epoch: 0, counter: 100)
        var bytes = ByteBuffer()
        old.encode(into: &bytes)
        bytes.writeRepeatingByte(0, count: 16)
        #expect(Self.deliver(bytes, to: &listener) == .dropped)
        old = DatagramHeader(kind: .sealed, receiverID: 22, epoch: 12, counter: 0)
        bytes.clear()
        old.encode(into: &bytes)
        bytes.writeRepeatingByte(0, count: 16)
        #expect(Self.deliver(bytes, to: &listener) == .dropped)
    }

    /// SPEC-GAPS 16: before §8 accepted any later epoch, losing every datagram of one epoch
    /// stopped unreliable delivery on the connection for good.
    @Test(arguments: [true, false])
    func deliveryResumesAfterWholeEpochsAreLost(encrypted: Bool) throws {
        var limits = DatagramPeerState.Limits()
        limits.epochCounterLimit = 4
        var (dialer, listener) = Self.pair(encrypted: encrypted, limits: limits)
        var all: [ByteBuffer] = []
        for index in 0..<24 { all.append(try sealed(&dialer, ByteBuffer(string: "\(index)"))) }
        // Epoch 0 arrives; epochs 1, 2 and 3 are lost whole, except one of epoch 3 held back.
        for (index, datagram) in all[0..<4].enumerated() { #expect(Self.deliver(datagram, to: &listener) == .message(ByteBuffer(string: "\(index)"))) }
        let lateOfEpoch3 = all[13]
        var received: [String] = []
        func deliver(_ range: Range<Int>) {
            for datagram in all[range] {
                if case .message(let message) = Self.deliver(datagram, to: &listener) { received.append(String(buffer: message)) }
            }
        }
        deliver(16..<20)  // epoch 4
        // Epoch 3 is now the previous epoch, though none of it arrived: its late datagram counts
        // once, then is a replay.
        #expect(Self.deliver(lateOfEpoch3, to: &listener) == .message(ByteBuffer(string: "13")))
        #expect(Self.deliver(lateOfEpoch3, to: &listener) == .dropped)
        // Epochs 0-2 are gone.
        #expect(Self.deliver(all[9], to: &listener) == .dropped)
        deliver(20..<24)  // epoch 5
        #expect(received == (16..<24).map { "\($0)" })
        #expect(Self.deliver(all[14], to: &listener) == .dropped)  // epoch 3, two back now
    }

    /// A datagram that jumps past lost epochs costs one derivation; the skipped previous epoch's
    /// key is derived only when a datagram of it arrives. Forgeries under the previous epoch
    /// count toward the integrity limit as under the current one.
    @Test func skippedEpochsCostOneDerivationAndPreviousEpochForgeriesCount() throws {
        var limits = DatagramPeerState.Limits()
        limits.epochCounterLimit = 4
        limits.failureLimit = 3
        let keys = SharedKeys()
        var listener = DatagramPeerState(isEncrypted: true, weAreDialer: false, peerReceiverID: 11, limits: limits, keySource: keys.countedKey)
        var dialer = DatagramPeerState(isEncrypted: true, weAreDialer: true, peerReceiverID: 22, limits: limits, keySource: keys.key)
        let all = try (0..<16).map { try sealed(&dialer, ByteBuffer(string: "\($0)")) }
        keys.derivations = 0
        #expect(Self.deliver(all[12], to: &listener) == .message(ByteBuffer(string: "12")))  // epoch 3, from 0
        #expect(keys.derivations == 1)
        #expect(Self.deliver(all[9], to: &listener) == .message(ByteBuffer(string: "9")))  // epoch 2, now previous
        #expect(keys.derivations == 2)
        var outcomes: [DatagramPeerState.Received] = []
        for counter in 100..<103 {
            outcomes.append(Self.deliver(Self.forged(receiverID: 22, epoch: 2, counter: UInt64(counter)), to: &listener))
        }
        #expect(outcomes == [.dropped, .dropped, .integrityLimitReached])
        #expect(keys.derivations == 2)
    }

    /// A forger alternating later epochs costs one key derivation per datagram, moves nothing,
    /// and its failures count together toward the integrity limit.
    @Test func forgeriesUnderLaterEpochsMoveNothingAndCountTogether() throws {
        var limits = DatagramPeerState.Limits()
        limits.failureLimit = 10
        let keys = SharedKeys()
        var listener = DatagramPeerState(isEncrypted: true, weAreDialer: false, peerReceiverID: 11, limits: limits, keySource: keys.countedKey)
        var dialer = DatagramPeerState(isEncrypted: true, weAreDialer: true, peerReceiverID: 22, keySource: keys.key)
        keys.derivations = 0
        var outcomes: [DatagramPeerState.Received] = []
        for index in 0..<10 {
            outcomes.append(Self.deliver(Self.forged(receiverID: 22, epoch: UInt32(1 + index % 2) * 1000, counter: UInt64(index)), to: &listener))
        }
        #expect(keys.derivations == 10)
        #expect(outcomes.dropLast().allSatisfy { $0 == .dropped })
        #expect(outcomes.last == .integrityLimitReached)
        // The genuine epoch 0 still opens: the forgeries changed no epoch.
        #expect(Self.deliver(try sealed(&dialer, ByteBuffer(string: "still here")), to: &listener) == .message(ByteBuffer(string: "still here")))
    }

    @Test func tooManyForgeriesInOneEpochCloseTheConnection() throws {
        var limits = DatagramPeerState.Limits()
        limits.failureLimit = 10
        var (_, listener) = Self.pair(limits: limits)
        var outcomes: [DatagramPeerState.Received] = []
        for counter in 0..<10 {
            outcomes.append(Self.deliver(Self.forged(receiverID: 11, epoch: 0, counter: UInt64(counter)), to: &listener))
        }
        #expect(outcomes.dropLast().allSatisfy { $0 == .dropped })
        #expect(outcomes.last == .integrityLimitReached)
    }

    /// A plain datagram needs no key, so anyone who copies the receiver ID could send this one:
    /// before the fix, `UInt64.max` trapped in the replay window and killed the process.
    @Test(arguments: [UInt64.max, UInt64.max - 1, WireLimits.datagramEpochCounterLimit, WireLimits.datagramEpochCounterLimit + 1])
    func countersAtOrPastTheEpochLimitAreDropped(counter: UInt64) throws {
        for encrypted in [false, true] {
            var (dialer, listener) = Self.pair(encrypted: encrypted)
            var bytes = ByteBuffer()
            DatagramHeader(kind: encrypted ? .sealed : .plain, receiverID: 11, epoch: 0, counter: counter).encode(into: &bytes)
            bytes.writeRepeatingByte(0x41, count: 40)
            #expect(Self.deliver(bytes, to: &listener) == .dropped)
            // Genuine traffic still flows afterwards.
            let genuine = try sealed(&dialer, ByteBuffer(string: "after"))
            #expect(Self.deliver(genuine, to: &listener) == .message(ByteBuffer(string: "after")))
        }
    }

    @Test func theLastCounterBelowTheLimitIsAccepted() throws {
        var (_, listener) = Self.pair(encrypted: false)
        var bytes = ByteBuffer()
        DatagramHeader(kind: .plain, receiverID: 11, epoch: 0, counter: WireLimits.datagramEpochCounterLimit - 1).encode(into: &bytes)
        bytes.writeString("last")
        #expect(Self.deliver(bytes, to: &listener) == .message(ByteBuffer(string: "last")))
        #expect(Self.deliver(bytes, to: &listener) == .dropped)
    }

    @Test func plainDatagramsStillRejectReplaysAndStrays() throws {
        var (dialer, listener) = Self.pair(encrypted: false)
        let datagram = try sealed(&dialer, ByteBuffer(string: "plain"))
        #expect(datagram.readableBytesView.contains(subsequence: Array("plain".utf8)))
        #expect(Self.deliver(datagram, to: &listener) == .message(ByteBuffer(string: "plain")))
        #expect(Self.deliver(datagram, to: &listener) == .dropped)
        var sealedKind = Array(datagram.readableBytesView)
        sealedKind[0] = 1
        #expect(Self.deliver(ByteBuffer(bytes: sealedKind), to: &listener) == .dropped)
    }
}

func sealed(_ state: inout DatagramPeerState, _ message: ByteBuffer) throws -> ByteBuffer {
    let datagram = state.seal(message)
    return try #require(datagram)
}

extension ByteBufferView {
    func contains(subsequence: [UInt8]) -> Bool { Array(self).contains(subsequence: subsequence) }
}
