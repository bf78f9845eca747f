import MultipeerCrypto
import MultipeerSession
import MultipeerWire
import NIOCore
import MultipeerProtocol

/// What one datagram script did, so tests can tell that a seed reaches the state it is named for.
public struct DatagramRun: Sendable {
    public var isSealed = false
    public var accepted = 0
    public var dropped = 0
    public var integrityLimitReached = 0
    /// The model's current epoch at the end (the receiver's, since they agreed throughout).
    public var epoch: UInt32 = 0
}

extension SessionFuzzChecks {
    /// Datagram receive path, `DatagramPeerState.open(header:body:)` (docs/PROTOCOL.md §8).
    ///
    /// Input: three setup bytes (kind and direction and window size; epoch counter limit;
    /// failure limit), then operations (`DatagramOp`). A sender state seals genuine datagrams
    /// with the same deterministic keys the receiver derives, so epochs advance and windows fill.
    ///
    /// Checks, against a model of receiving rules 2-4 kept with exact sets: no trap; an authentic
    /// datagram (genuine tag, or any plain one) is accepted intact exactly when the model accepts
    /// it; nothing else is accepted; no (epoch, counter) is accepted twice; an authentic datagram
    /// never counts toward the integrity limit.
    @discardableResult
    public static func checkDatagram(_ bytes: UnsafeRawBufferPointer) -> DatagramRun {
        var input = FuzzInput(bytes)
        let setup = input.byte()
        let sealed = setup & 1 != 0
        let receiverIsDialer = setup & 2 != 0
        var limits = DatagramPeerState.Limits()
        limits.replayWindow = 64 << Int(setup >> 2 & 3)
        let counterLimit = input.byte()
        // Small limits make epochs roll over within a short script; 0xFF keeps the real one.
        if counterLimit != 0xFF { limits.epochCounterLimit = UInt64(counterLimit % 32) + 1 }
        let failureLimit = input.byte()
        if failureLimit != 0xFF { limits.failureLimit = UInt64(failureLimit % 16) + 1 }

        var harness = DatagramHarness(sealed: sealed, receiverIsDialer: receiverIsDialer, limits: limits)
        var operations = 0
        while !input.isExhausted && operations < 1_024 {
            operations += 1
            harness.perform(DatagramOp(rawValue: input.byte() % DatagramOp.count)!, &input)
        }
        harness.run.epoch = harness.model.current
        return harness.run
    }

    /// The key for a direction and epoch: a fixed pattern, so runs reproduce exactly.
    static func datagramKey(_ direction: DatagramDirection, _ epoch: UInt32) -> SecureBytes {
        SecureBytes(count: DatagramCipher.keyLength) { raw in
            for index in raw.indices { raw[index] = UInt8(truncatingIfNeeded: index &* 37 &+ 11) }
            raw[0] = direction == .dialerToListener ? 0xD1 : 0x1D
            withUnsafeBytes(of: epoch.bigEndian) { epochBytes in
                for (index, byte) in epochBytes.enumerated() { raw[1 + index] = byte }
            }
        }
    }
}

/// The operations of a datagram script, one input byte each (modulo `count`) and then arguments.
enum DatagramOp: UInt8, CaseIterable {
    /// Length-prefixed message: seal it and deliver it.
    case sealAndDeliver
    /// Length-prefixed message: seal it and hold it back (lost or late).
    case sealAndHold
    /// Index byte: deliver an earlier genuine datagram again, or for the first time if held.
    case deliverEarlier
    /// Length-prefixed bytes through `DatagramHeader.decode(datagram:)`.
    case raw
    /// Kind bit, epoch and counter choices, body: a header the sender never made. A sealed body
    /// may be sealed with the real key, as a sender in that state would.
    case craftedHeader
    /// Index and position bytes: an earlier genuine datagram with one bit flipped.
    case tamper
    /// Count byte: seal that many, keep them as held; the receiver sees none (loss, epoch jumps).
    case skip
    /// Count byte: seal that many and deliver them newest first.
    case reversedBurst

    static let count = UInt8(allCases.count)
}

/// Receiving rules 2-4 with plain sets instead of a bitmap: what the receiver must accept.
struct ReceiverModel {
    struct Window {
        var highest: UInt64?
        var seen: Set<UInt64> = []

        func accepts(_ counter: UInt64, size: UInt64) -> Bool {
            guard let highest, counter <= highest else { return true }
            return highest - counter < size && !seen.contains(counter)
        }
    }

    let windowSize: UInt64
    var current: UInt32 = 0
    /// The current epoch's window and, once the peer moved on, the previous one's.
    var windows: [UInt32: Window] = [0: Window()]

    func accepts(epoch: UInt32, counter: UInt64) -> Bool {
        // No sender reaches the epoch limit, so a counter there is never genuine.
        guard counter < WireLimits.datagramEpochCounterLimit else { return false }
        // §8 rule 2: any later epoch, whatever was lost in between.
        if epoch > current { return true }
        guard epoch == current || current > 0 && epoch == current - 1, let window = windows[epoch] else { return false }
        return window.accepts(counter, size: windowSize)
    }

    mutating func commit(epoch: UInt32, counter: UInt64) {
        if epoch > current {
            // The previous epoch keeps its window after a step of one, and starts empty after a
            // jump (none of it was accepted, or the receiver would have moved to it).
            let previous = epoch == current + 1 ? windows[current] ?? Window() : Window()
            windows = [epoch - 1: previous, epoch: Window()]
            current = epoch
        }
        windows[epoch, default: Window()].seen.insert(counter)
        windows[epoch, default: Window()].highest = max(windows[epoch]?.highest ?? 0, counter)
    }
}

struct DatagramHarness {
    let kind: DatagramHeader.Kind
    /// The direction the sender seals in and the receiver opens.
    let direction: DatagramDirection
    var sender: DatagramPeerState
    var receiver: DatagramPeerState
    var model: ReceiverModel
    var run = DatagramRun()
    /// Genuine datagrams and their messages, newest last, for replays and late delivery.
    var history: [ByteBuffer] = []
    var acceptedEver: Set<Slot> = []
    /// Datagrams delivered so far that were not authentic.
    var inauthentic: UInt64 = 0
    let failureLimit: UInt64

    struct Slot: Hashable {
        let epoch: UInt32
        let counter: UInt64
    }

    init(sealed: Bool, receiverIsDialer: Bool, limits: DatagramPeerState.Limits) {
        kind = sealed ? .sealed : .plain
        direction = receiverIsDialer ? .listenerToDialer : .dialerToListener
        let keys: DatagramPeerState.KeySource = { direction, epoch in SessionFuzzChecks.datagramKey(direction, epoch) }
        sender = DatagramPeerState(isEncrypted: sealed, weAreDialer: !receiverIsDialer, peerReceiverID: 22, limits: limits, keySource: keys)
        receiver = DatagramPeerState(isEncrypted: sealed, weAreDialer: receiverIsDialer, peerReceiverID: 11, limits: limits, keySource: keys)
        model = ReceiverModel(windowSize: UInt64(limits.replayWindow))
        failureLimit = limits.failureLimit
        run.isSealed = sealed
    }

    mutating func perform(_ op: DatagramOp, _ input: inout FuzzInput) {
        switch op {
        case .sealAndDeliver:
            if let datagram = seal(ByteBuffer(bytes: input.bytes(upTo: 96))) { deliver(datagram) }
        case .sealAndHold:
            _ = seal(ByteBuffer(bytes: input.bytes(upTo: 96)))
        case .deliverEarlier:
            let index = Int(input.byte())
            guard !history.isEmpty else { return }
            deliver(history[history.count - 1 - index % history.count])
        case .raw:
            deliver(ByteBuffer(bytes: input.bytes(upTo: 255)))
        case .craftedHeader:
            craftedHeader(&input)
        case .tamper:
            let index = Int(input.byte())
            let position = Int(input.integer(UInt16.self))
            let bit = input.byte() % 8
            guard !history.isEmpty else { return }
            var bytes = Array(history[history.count - 1 - index % history.count].readableBytesView)
            bytes[position % bytes.count] ^= 1 << bit
            deliver(ByteBuffer(bytes: bytes))
        case .skip:
            for index in 0..<Int(input.byte() % 64) { _ = seal(ByteBuffer(integer: UInt16(index))) }
        case .reversedBurst:
            let burst = (0..<Int(input.byte() % 16)).compactMap { seal(ByteBuffer(integer: UInt16($0))) }
            for datagram in burst.reversed() { deliver(datagram) }
        }
    }

    /// Seals from the sender and checks that the datagram is well-formed and opens to `message`.
    mutating func seal(_ message: ByteBuffer) -> ByteBuffer? {
        // The sender gives up only when it has run out of epochs, far beyond any script.
        guard let datagram = sender.seal(message) else { return nil }
        guard let (header, body) = try? DatagramHeader.decode(datagram: datagram) else {
            preconditionFailure("a sealed datagram does not decode")
        }
        precondition(header.kind == kind && header.receiverID == 22, "a sealed datagram has the wrong header")
        precondition(authenticMessage(header, body) == message, "a sealed datagram does not open to its message")
        history.append(datagram)
        if history.count > 256 { history.removeFirst(64) }
        return datagram
    }

    /// What the receiver must return if it accepts: nil when the datagram is not authentic.
    func authenticMessage(_ header: DatagramHeader, _ body: ByteBuffer) -> ByteBuffer? {
        guard header.kind == kind else { return nil }
        switch kind {
        case .plain: return body
        case .sealed: return DatagramCipher.open(body, header: header, key: SessionFuzzChecks.datagramKey(direction, header.epoch))
        }
    }

    mutating func deliver(_ datagram: ByteBuffer) {
        guard let (header, body) = try? DatagramHeader.decode(datagram: datagram) else {
            run.dropped += 1
            return
        }
        deliver(header, body)
    }

    mutating func deliver(_ header: DatagramHeader, _ body: ByteBuffer) {
        let expected = authenticMessage(header, body)
        if expected == nil { inauthentic += 1 }
        let mustAccept = expected != nil && model.accepts(epoch: header.epoch, counter: header.counter)
        let received = receiver.open(header: header, body: body)
        switch received {
        case .message(let message):
            precondition(expected != nil, "an inauthentic datagram was accepted at \(Self.describe(header))")
            precondition(
                mustAccept, "accepted at \(Self.describe(header)), outside the window or replayed or past the epoch limit")
            precondition(message == expected, "accepted at \(Self.describe(header)), but not the message that was sent")
            // Independent of the model: whatever the window does, no slot opens twice.
            precondition(
                acceptedEver.insert(Slot(epoch: header.epoch, counter: header.counter)).inserted,
                "\(Self.describe(header)) accepted twice")
            model.commit(epoch: header.epoch, counter: header.counter)
            run.accepted += 1
        case .dropped:
            precondition(!mustAccept, "authentic datagram at \(Self.describe(header)), new and in the window, was dropped")
            run.dropped += 1
        case .integrityLimitReached:
            precondition(expected == nil, "an authentic datagram at \(Self.describe(header)) counted as a failed opening")
            // One epoch's failures are at most all failures so far.
            precondition(inauthentic >= failureLimit, "integrity limit reached after \(inauthentic) failed openings")
            run.integrityLimitReached += 1
        }
    }

    static func describe(_ header: DatagramHeader) -> String { "epoch \(header.epoch) counter \(header.counter)" }

    mutating func craftedHeader(_ input: inout FuzzInput) {
        let flags = input.byte()
        let headerKind: DatagramHeader.Kind = flags & 1 == 0 ? kind : (kind == .sealed ? .plain : .sealed)
        let epoch = chooseEpoch(&input)
        let counter = chooseCounter(&input, epoch: epoch)
        let header = DatagramHeader(kind: headerKind, receiverID: 11, epoch: epoch, counter: counter)
        let message = ByteBuffer(bytes: input.bytes(upTo: 96))
        if flags & 2 != 0, headerKind == .sealed {
            // Sealed with the real key: what a sender in that state would send.
            var datagram = DatagramCipher.seal(message, header: header, key: SessionFuzzChecks.datagramKey(direction, epoch))
            datagram.moveReaderIndex(forwardBy: WireLimits.datagramHeaderLength)
            deliver(header, datagram)
        } else {
            deliver(header, message)
        }
    }

    /// Near the receiver's epoch, or at the edges of the range.
    func chooseEpoch(_ input: inout FuzzInput) -> UInt32 {
        let choice = input.byte()
        let small = UInt32(choice >> 3)
        switch choice % 8 {
        case 0: return model.current
        case 1: return model.current &+ 1
        case 2: return model.current &- 1
        case 3: return model.current &+ 2 &+ small
        case 4: return model.current &- 2 &- small
        case 5: return small
        case 6: return UInt32.max - small
        default: return input.integer()
        }
    }

    /// Near the edges of the window, near the epoch limit, near `UInt64.max`, or anything.
    func chooseCounter(_ input: inout FuzzInput, epoch: UInt32) -> UInt64 {
        let choice = input.byte()
        let small = UInt64(choice >> 4)
        let highest = model.windows[epoch]?.highest ?? 0
        switch choice % 16 {
        case 0: return small
        case 1: return highest &+ small
        case 2: return highest &- small
        case 3: return highest &- model.windowSize &+ small
        case 4: return highest &+ model.windowSize &- small
        case 5: return WireLimits.datagramEpochCounterLimit &- 1 &- small
        case 6: return WireLimits.datagramEpochCounterLimit &+ small
        case 7: return UInt64.max &- small
        case 8: return UInt64(UInt32.max) &+ small
        case 9: return UInt64(1) << (small + UInt64(input.byte() % 4) * 16)
        case 10: return UInt64(input.integer(UInt16.self))
        default: return input.integer()
        }
    }
}
