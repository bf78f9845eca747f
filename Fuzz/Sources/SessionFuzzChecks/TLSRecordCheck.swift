import MultipeerCrypto
import NIOCore

/// What one TLS record script did, so tests can tell that a seed reaches the state it is named for.
public struct TLSRecordRun: Sendable, Equatable {
    /// Application bytes the layer read.
    public var delivered = 0
    /// Application bytes the layer sealed that the honest peer opened.
    public var sentAndOpened = 0
    public var keyUpdatesReceived = 0
    public var keyUpdatesSent = 0
    public var failed = false
    public var closed = false

    public init(
        delivered: Int = 0, sentAndOpened: Int = 0, keyUpdatesReceived: Int = 0, keyUpdatesSent: Int = 0,
        failed: Bool = false, closed: Bool = false
    ) {
        self.delivered = delivered
        self.sentAndOpened = sentAndOpened
        self.keyUpdatesReceived = keyUpdatesReceived
        self.keyUpdatesSent = keyUpdatesSent
        self.failed = failed
        self.closed = closed
    }
}

extension SessionFuzzChecks {
    /// TLS 1.3 after the handshake, `TLSRecordLayer` (RFC 8446 §4.6.3, §5, §6): the parsing behind
    /// the AEAD, which flipped bits in a real connection never reach.
    ///
    /// Input: a setup byte (bit 0 the layer is the client; bits 1-2 the suite; bits 3-5 a
    /// KeyUpdate every 1 << n records, 7 for the real limit), then operations (`TLSRecordOp`). A
    /// forger seals as the peer with the same fixed secrets, so any content of any type arrives
    /// authentic; raw bytes and flipped bits arrive as they are.
    ///
    /// Checks: no trap; what is read is a prefix of the application data forged, in order, and a
    /// record's content is at most 16 KiB; after a failure every read fails, after close_notify
    /// every read is `.closed`; everything the layer writes opens under the honest peer's keys,
    /// in order, and holds its own application data exactly, KeyUpdates, and alerts; nothing
    /// follows its close_notify or a fatal alert.
    @discardableResult
    public static func checkTLSRecords(_ bytes: UnsafeRawBufferPointer) -> TLSRecordRun {
        var input = FuzzInput(bytes)
        var harness = TLSRecordHarness(setup: input.byte())
        var operations = 0
        while !input.isExhausted && operations < 512 {
            operations += 1
            harness.perform(TLSRecordOp(rawValue: input.byte() % TLSRecordOp.count)!, &input)
        }
        harness.read(capacity: 65_536)
        harness.checkOutput()
        return harness.run
    }

    /// A fixed secret per direction, so runs reproduce exactly.
    static func trafficSecret(_ client: Bool, length: Int) -> SecureBytes {
        SecureBytes(count: length) { raw in
            for index in raw.indices { raw[index] = UInt8(truncatingIfNeeded: index &* 29 &+ (client ? 3 : 101)) }
        }
    }
}

enum TLSRecordOp: UInt8, CaseIterable {
    /// Application data of up to 255 bytes.
    case forgeData
    /// Application data of n × 128 bytes, up to 16,384 + 128 (over the limit past 16 KiB).
    case forgeLarge
    /// Content that carries its own type and padding (sealed with type 0).
    case forgeInner
    /// Handshake content of the fuzzer's choosing.
    case forgeHandshake
    /// A well-formed KeyUpdate; the forger moves to its next key.
    case forgeKeyUpdate
    /// An alert (two bytes of the fuzzer's choosing).
    case forgeAlert
    /// Bytes onto the wire unsealed.
    case rawBytes
    /// Flips one bit of the wire not yet delivered.
    case flipBit
    /// Delivers some of the wire, as one received buffer.
    case deliver
    /// Reads with a capacity of the fuzzer's choosing.
    case read
    /// The layer seals application data (up to 255 × 64 bytes, one record).
    case send
    /// The layer sends close_notify.
    case close

    static let count = UInt8(allCases.count)
}

struct TLSRecordHarness {
    private let layer: TLSRecordLayer
    private let forger: TLSRecordProtection
    private let opener: TLSRecordProtection
    private var inbound = CiphertextQueue()
    /// What the layer wrote, not yet opened by the honest peer.
    private var output = ByteBuffer()
    /// Forged and raw bytes not yet delivered.
    private var wire = ByteBuffer()
    /// Application data the peer sealed, in order, that a reader may see.
    private var forged: [UInt8] = []
    private var delivered: [UInt8] = []
    private var sent: [UInt8] = []
    private var opened: [UInt8] = []
    /// The layer's output ended with close_notify or a fatal alert.
    private var outputEnded = false
    var run = TLSRecordRun()

    init(setup: UInt8) {
        let isClient = setup & 1 != 0
        let suite = TLSCipherSuite.allCases[Int(setup >> 1 & 3) % TLSCipherSuite.allCases.count]
        let shift = setup >> 3 & 7
        let client = SessionFuzzChecks.trafficSecret(true, length: suite.hashLength)
        let server = SessionFuzzChecks.trafficSecret(false, length: suite.hashLength)
        do {
            layer = try TLSRecordLayer(
                suite: suite, role: isClient ? .client : .server, clientSecret: client, serverSecret: server,
                recordsPerKeyUpdate: shift == 7 ? 1 << 24 : 1 << UInt64(shift))
            forger = try TLSRecordProtection(suite: suite, secret: isClient ? server : client, sealing: true)
            opener = try TLSRecordProtection(suite: suite, secret: isClient ? client : server, sealing: false)
        } catch {
            fatalError("record layer set-up failed: \(error)")
        }
    }

    mutating func perform(_ operation: TLSRecordOp, _ input: inout FuzzInput) {
        switch operation {
        case .forgeData:
            let content = input.bytes(upTo: 255)
            forge(23, content)
            forged += content
        case .forgeLarge:
            let content = [UInt8](repeating: input.byte(), count: Int(input.byte() % 130) * 128)
            forge(23, content)
            if content.count <= TLSEngine.maximumRecordPlaintext { forged += content }
        case .forgeInner:
            let inner = input.bytes(upTo: 255)
            forge(0, inner)
            // Only application data behind zero padding can be read; anything else must not be.
            let unpadded = inner.reversed().drop { $0 == 0 }.reversed()
            if unpadded.last == 23 { forged += unpadded.dropLast() }
        case .forgeHandshake:
            forge(22, input.bytes(upTo: 255))
        case .forgeKeyUpdate:
            forge(22, [24, 0, 0, 1, input.byte() & 1])
            try! forger.update()
        case .forgeAlert:
            forge(21, input.take(2))
        case .rawBytes:
            wire.writeBytes(input.bytes(upTo: 64))
        case .flipBit:
            let position = Int(input.integer(UInt16.self))
            guard wire.readableBytes > 0 else { return }
            let index = wire.readerIndex + position % wire.readableBytes
            wire.setInteger(wire.getInteger(at: index, as: UInt8.self)! ^ (1 << (input.byte() & 7)), at: index)
        case .deliver:
            let count = input.byte()
            let length = count == 0 ? wire.readableBytes : min(wire.readableBytes, Int(count) * 7)
            if let piece = wire.readSlice(length: length) { inbound.append(piece) }
        case .read:
            read(capacity: Int(input.integer(UInt16.self)) + 1)
        case .send:
            // At most one record: the engine cuts larger writes into records before they get here.
            let content = [UInt8](repeating: input.byte(), count: Int(input.byte()) * 64)
            let sealed = content.withUnsafeBytes { raw in
                (try? layer.sealApplicationData(raw, UnsafeRawBufferPointer(start: nil, count: 0), into: &output)) != nil
            }
            if sealed { sent += content }
            checkOutput()
        case .close:
            layer.sealCloseNotify(into: &output)
            checkOutput()
        }
    }

    private mutating func forge(_ type: UInt8, _ content: [UInt8]) {
        content.withUnsafeBytes { raw in
            do {
                try forger.seal(contentType: type, raw, into: &wire)
            } catch {
                fatalError("forging failed: \(error)")
            }
        }
    }

    mutating func read(capacity: Int) {
        var destination = [UInt8](repeating: 0, count: capacity)
        while true {
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            destination.withUnsafeMutableBytes { raw in
                outcome = Result { () throws(SecurityError) in try layer.read(from: &inbound, into: raw, output: &output) }
            }
            switch outcome {
            case .failure:
                precondition(!run.closed, "a read failed after close_notify")
                run.failed = true
            case .success(.bytes(let count)):
                precondition(!run.failed && !run.closed, "data read after a failure or close_notify")
                precondition(count > 0 && count <= capacity, "a read of \(count) bytes into \(capacity)")
                // Only the new bytes are compared: a script that reads a byte at a time stays linear.
                let start = delivered.count
                precondition(start + count <= forged.count && forged[start..<(start + count)].elementsEqual(destination[..<count]), "read bytes the peer did not send")
                delivered += destination[..<count]
                continue
            case .success(.wouldBlock):
                precondition(!run.failed && !run.closed, "a read after a failure or close_notify did not say so")
            case .success(.closed):
                precondition(!run.failed, "close_notify after a failure")
                run.closed = true
            }
            break
        }
        run.delivered = delivered.count
        run.keyUpdatesReceived = layer.keyUpdatesReceived
        checkOutput()
    }

    /// Opens what the layer wrote, as the honest peer would.
    mutating func checkOutput() {
        while output.readableBytes > 0 {
            precondition(!outputEnded, "the layer wrote after close_notify or a fatal alert")
            let length = Int(output.getInteger(at: output.readerIndex + 3, as: UInt16.self)!)
            precondition(output.readableBytes >= 5 + length, "the layer wrote part of a record")
            let record = output.readBytes(length: 5 + length)!
            var plaintext = [UInt8](repeating: 0, count: length)
            let inner = record.withUnsafeBytes { raw in plaintext.withUnsafeMutableBytes { opener.open(raw, into: $0.baseAddress!) } }
            guard let inner else { preconditionFailure("the honest peer could not open the layer's record") }
            precondition(plaintext[inner - 1] != 0, "the layer padded a record")
            let type = plaintext[inner - 1]
            let content = Array(plaintext[..<(inner - 1)])
            switch type {
            case 23:
                let start = opened.count
                precondition(start + content.count <= sent.count && sent[start..<(start + content.count)].elementsEqual(content), "the layer sent bytes it was not given")
                opened += content
            case 22:
                precondition(content.count == 5 && content[..<4] == [24, 0, 0, 1] && content[4] <= 1, "the layer sent a handshake message other than KeyUpdate")
                try! opener.update()
                run.keyUpdatesSent += 1
            case 21:
                precondition(content.count == 2, "an alert of \(content.count) bytes")
                outputEnded = true
            default:
                preconditionFailure("the layer sent content type \(type)")
            }
        }
        run.sentAndOpened = opened.count
        precondition(opened.count == sent.count, "the layer held back data it sealed")
    }
}
