import CMultipeerOpenSSL
import MultipeerCrypto
import NIOCore

/// What one differential script did, so tests can tell that a seed reaches the state it is named for.
public struct TLSDifferentialRun: Sendable, Equatable {
    public enum State: String, Sendable { case open, closed, failed }

    /// Application bytes the library read (OpenSSL read the same unless they parted by policy).
    public var delivered: Int
    /// Application bytes the library sealed and OpenSSL, as the peer, read back.
    public var written: Int
    /// KeyUpdates the library read.
    public var keyUpdatesRead: Int
    /// The library's reading side at the end.
    public var state: State
    /// The documented policies that explained a difference, in order.
    public var policies: [TLSDifferentialPolicy]

    public init(delivered: Int = 0, written: Int = 0, keyUpdatesRead: Int = 0, state: State = .open, policies: [TLSDifferentialPolicy] = []) {
        self.delivered = delivered
        self.written = written
        self.keyUpdatesRead = keyUpdatesRead
        self.state = state
        self.policies = policies
    }
}

extension SessionFuzzChecks {
    /// The library's TLS 1.3 record layer against OpenSSL's (RFC 8446 §4.6, §5, §6). Two OpenSSL
    /// endpoints finish a real handshake; `TLSRecordLayer` takes the traffic secrets the library's
    /// key-log capture took from it, for the role of one of them, which goes on with OpenSSL's own
    /// record layer (SSL_read, SSL_write). Both read the same forged stream and write the same
    /// plaintext; the other OpenSSL endpoint reads what the library writes.
    ///
    /// Input: a setup byte (bit 0 the role under test is the client; bits 1-2 the suite; bits 3-5
    /// the library starts a KeyUpdate every 1 << n records, 7 for the real limit, and OpenSSL is
    /// told to do the same), then operations (`TLSDifferentialOp`).
    ///
    /// Checks: no trap; after every read both have read the same bytes and are alike open, closed
    /// or failed, closed or failed at the same record (a failure that sends an alert on one side
    /// sends one on the other), and have taken the same KeyUpdates; a write is taken by both or refused by both; what each writes opens
    /// under the peer's keys to exactly the data it took, answers every KeyUpdate request before
    /// its next data (the library once, just before it; OpenSSL at once, per request), and nothing
    /// but OpenSSL's answers and alerts follows a close_notify; the OpenSSL peer reads all the
    /// library writes. Where a documented policy (`TLSDifferentialPolicy`) lets the two part,
    /// the check confirms the exact record they part at and then compares no further.
    @discardableResult
    public static func checkTLSDifferential(_ bytes: UnsafeRawBufferPointer) -> TLSDifferentialRun {
        var input = FuzzInput(bytes)
        let harness = TLSDifferentialHarness(setup: input.byte())
        var operations = 0
        while !input.isExhausted && operations < 512 {
            operations += 1
            harness.perform(TLSDifferentialOp(rawValue: input.byte() % TLSDifferentialOp.count)!, &input)
        }
        harness.finish()
        return harness.run
    }
}

enum TLSDifferentialOp: UInt8, CaseIterable {
    /// Application data of up to 255 bytes (none: an empty record).
    case forgeData
    /// Application data of n × 128 bytes, up to 16,384 + 128 (over the limit past 16 KiB).
    case forgeLarge
    /// Content of up to 255 bytes of any inner type, behind up to 16,320 bytes of padding.
    case forgePadded
    /// Up to 255 bytes that carry their own type and padding (sealed with type 0).
    case forgeInner
    /// A well-formed KeyUpdate in a record of its own; the forger moves to its next key.
    case forgeKeyUpdate
    /// An alert (two bytes of the fuzzer's choosing).
    case forgeAlert
    /// A KeyUpdate message (request byte of the fuzzer's choosing) into the staged handshake bytes.
    case stageKeyUpdate
    /// A well-formed NewSessionTicket into the staged handshake bytes.
    case stageTicket
    /// A handshake message header of any type and length into the staged bytes.
    case stageHeader
    /// n × 128 bytes of one value into the staged bytes.
    case stageFill
    /// Seals staged handshake bytes: one record of some, or all in records of 16 KiB.
    case flushHandshake
    /// Forges the last record's content again, up to 64 times.
    case repeatLast
    /// Bytes onto the wire unsealed.
    case rawBytes
    /// Flips one bit of the wire not yet delivered.
    case flipBit
    /// Delivers some of the wire to both, as one piece.
    case deliver
    /// Both read, with a capacity of the fuzzer's choosing, until neither can go on.
    case read
    /// Both write the same application data (up to 255 × 64 bytes, one record).
    case send
    /// Both send close_notify.
    case close

    static let count = UInt8(allCases.count)
}

/// A record the forger sealed, where it lies on the wire and what it holds inside.
private struct ForgedRecord {
    let start: Int
    let end: Int
    let inner: [UInt8]
}

final class TLSDifferentialHarness {
    /// A write OpenSSL was given, with whether the library took the same one (nil: OpenSSL's
    /// own KeyUpdate, told where the library started one).
    private struct PendingWrite {
        enum Kind {
            case data([UInt8])
            case keyUpdate
            case close
        }

        let kind: Kind
        let libraryTook: Bool?
        /// OpenSSL held it back behind a handshake message.
        var waited = false
    }

    private static let wireLimit = 262_144

    private let isClient: Bool
    private let suite: TLSCipherSuite
    private let clientSecret: SecureBytes
    private let serverSecret: SecureBytes
    private let recordsPerKeyUpdate: UInt64

    // The library.
    private let layer: TLSRecordLayer
    private var inbound = CiphertextQueue()
    private var libraryOutput = ByteBuffer()
    private var libraryRead: [UInt8] = []
    private var libraryState = TLSDifferentialRun.State.open
    private var libraryWrites: TLSWrittenRecords

    // OpenSSL: the endpoint of the same role, and its peer, which reads what the library writes.
    private let subject: OpenSSLEndpoint
    private let peer: OpenSSLEndpoint
    private var subjectRead: [UInt8] = []
    private var subjectState = TLSDifferentialRun.State.open
    private var subjectWrites: TLSWrittenRecords
    /// Writes OpenSSL holds back until it has read the rest of a handshake message.
    private var subjectQueue: [PendingWrite] = []
    private var peerRead: [UInt8] = []
    private var peerState = OpenSSLEndpoint.ReadState.open

    // The forged stream.
    private let forger: TLSRecordProtection
    private var forgerMessages = HandshakeReassembler()
    private var wire: [UInt8] = []
    private var delivered = 0
    /// Where the first raw bytes went, and the bits flipped (a bit flipped twice is as sealed).
    private var rawFrom = Int.max
    private var flipped: [Int: UInt8] = [:]
    /// The first byte not as the forger sealed it.
    private var tamperedFrom: Int { min(rawFrom, flipped.keys.min() ?? Int.max) }
    private var records: [ForgedRecord] = []
    private var lastForged: (type: UInt8, content: [UInt8])?
    private var staged: [UInt8] = []
    private var policies: TLSRecordPolicies
    private var followed = 0

    // The comparison.
    /// Set once the two parted by a documented policy: nothing more is compared between them.
    private var parted = false
    /// The library failed on a record that OpenSSL has yet to judge (a policy says why).
    private var libraryAhead = false
    /// OpenSSL failed on a handshake message it read to write; the library has yet to read the
    /// record it fails on, and meanwhile takes writes that OpenSSL refuses.
    private var subjectFailedWhileWriting = false
    /// Writes one side took and the other did not, each explained by a policy.
    private var writesDiffer = false
    /// Bytes of the two reads compared so far.
    private var compared = 0
    private var usedPolicies: [TLSDifferentialPolicy] = []

    init(setup: UInt8) {
        isClient = setup & 1 != 0
        suite = TLSCipherSuite.allCases[Int(setup >> 1 & 3) % TLSCipherSuite.allCases.count]
        let shift = setup >> 3 & 7
        recordsPerKeyUpdate = shift == 7 ? 1 << 24 : 1 << UInt64(shift)
        let handshake = OpenSSLHandshake(suite: suite)
        clientSecret = handshake.clientSecret
        serverSecret = handshake.serverSecret
        subject = isClient ? handshake.client : handshake.server
        peer = isClient ? handshake.server : handshake.client
        policies = TLSRecordPolicies(isClient: isClient)
        do {
            layer = try Self.makeLayer(suite: suite, isClient: isClient, client: clientSecret, server: serverSecret, recordsPerKeyUpdate: recordsPerKeyUpdate)
            forger = try TLSRecordProtection(suite: suite, secret: isClient ? serverSecret : clientSecret, sealing: true)
            let written = isClient ? clientSecret : serverSecret
            libraryWrites = TLSWrittenRecords(opener: try TLSRecordProtection(suite: suite, secret: written, sealing: false), isLibrary: true)
            subjectWrites = TLSWrittenRecords(opener: try TLSRecordProtection(suite: suite, secret: written, sealing: false), isLibrary: false)
        } catch {
            fatalError("record layer set-up failed: \(error)")
        }
    }

    private static func makeLayer(
        suite: TLSCipherSuite, isClient: Bool, client: SecureBytes, server: SecureBytes, recordsPerKeyUpdate: UInt64
    ) throws(SecurityError) -> TLSRecordLayer {
        try TLSRecordLayer(suite: suite, role: isClient ? .client : .server, clientSecret: client, serverSecret: server, recordsPerKeyUpdate: recordsPerKeyUpdate)
    }

    var run: TLSDifferentialRun {
        TLSDifferentialRun(
            delivered: libraryRead.count, written: peerRead.count, keyUpdatesRead: layer.keyUpdatesReceived, state: libraryState,
            policies: usedPolicies)
    }

    // MARK: Operations

    func perform(_ operation: TLSDifferentialOp, _ input: inout FuzzInput) {
        switch operation {
        case .forgeData:
            forge(23, input.bytes(upTo: 255))
        case .forgeLarge:
            forge(23, [UInt8](repeating: input.byte(), count: Int(input.byte() % 130) * 128))
        case .forgePadded:
            let type = input.byte()
            let content = input.bytes(upTo: 255)
            let padding = Int(input.byte()) * 64
            // Sealed with type 0, which adds one more byte of padding.
            forge(0, content + [type] + [UInt8](repeating: 0, count: padding))
        case .forgeInner:
            forge(0, input.bytes(upTo: 255))
        case .forgeKeyUpdate:
            forge(22, [24, 0, 0, 1, input.byte() & 1])
        case .forgeAlert:
            forge(21, input.take(2))
        case .stageKeyUpdate:
            stage([24, 0, 0, 1, input.byte()])
        case .stageTicket:
            stage(Self.ticket(lifetime: input.byte(), nonceLength: Int(input.byte() % 33), ticketLength: Int(input.byte()) * 4 + 1, earlyData: input.bool()))
        case .stageHeader:
            stage([input.byte()] + input.take(3))
        case .stageFill:
            let value = input.byte()
            stage([UInt8](repeating: value, count: Int(input.byte()) * 128))
        case .flushHandshake:
            flush(input.byte())
        case .repeatLast:
            let count = Int(input.byte() % 64) + 1
            if let last = lastForged { for _ in 0..<count { forge(last.type, last.content) } }
        case .rawBytes:
            let bytes = input.bytes(upTo: 64)
            guard !bytes.isEmpty, wire.count + bytes.count <= Self.wireLimit else { return }
            rawFrom = min(rawFrom, wire.count)
            wire += bytes
        case .flipBit:
            let position = Int(input.integer(UInt16.self))
            let bit = input.byte() & 7
            guard wire.count > delivered else { return }
            let index = delivered + position % (wire.count - delivered)
            wire[index] ^= 1 << bit
            flipped[index, default: 0] ^= 1 << bit
            if flipped[index] == 0 { flipped[index] = nil }
        case .deliver:
            let count = input.byte()
            deliver(count == 0 ? wire.count - delivered : min(wire.count - delivered, Int(count) * 7))
        case .read:
            read(capacity: Int(input.integer(UInt16.self)) + 1)
        case .send:
            let value = input.byte()
            let count = Int(input.byte()) * 64
            if count > 0 { send([UInt8](repeating: value, count: count)) }
        case .close:
            close()
        }
    }

    /// Delivers the rest of the wire, reads it all, and compares where both ended.
    func finish() {
        deliver(wire.count - delivered)
        read(capacity: 65_536)
        precondition(subjectQueue.isEmpty || subject.isInInit, "OpenSSL still holds writes outside a handshake message")
        if !parted && !writesDiffer && subjectQueue.isEmpty {
            precondition(libraryWrites.accepted == subjectWrites.accepted, "the two took different data to write")
            precondition(
                libraryWrites.keyUpdatesRequested == subjectWrites.keyUpdatesRequested && libraryWrites.closeNotify == subjectWrites.closeNotify,
                "the two wrote different KeyUpdate requests or close_notify")
        }
    }

    // MARK: Forging

    private func forge(_ type: UInt8, _ content: [UInt8]) {
        let recordLength = 5 + content.count + 1 + TLSRecordProtection.tagLength
        guard recordLength <= 5 + TLSRecordProtection.maximumCiphertextLength, wire.count + recordLength <= Self.wireLimit else { return }
        var sealed = ByteBuffer()
        content.withUnsafeBytes { raw in
            do { try forger.seal(contentType: type, raw, into: &sealed) } catch { fatalError("forging failed: \(error)") }
        }
        let inner = content + [type]
        records.append(ForgedRecord(start: wire.count, end: wire.count + sealed.readableBytes, inner: inner))
        wire += sealed.readableBytesView
        lastForged = (type, content)
        // The honest peer moves to its next key after each KeyUpdate it sends.
        guard let typeIndex = inner.lastIndex(where: { $0 != 0 }), inner[typeIndex] == 22 else { return }
        forgerMessages.append(inner[..<typeIndex])
        while let message = forgerMessages.next() {
            if message.type == 24 {
                do { try forger.update() } catch { fatalError("forger KeyUpdate: \(error)") }
            }
        }
    }

    private func stage(_ bytes: [UInt8]) {
        guard staged.count + bytes.count <= Self.wireLimit else { return }
        staged += bytes
    }

    /// 1-127: that many staged bytes in one record; 128-255: (n - 127) × 128; 0: all, 16 KiB a record.
    private func flush(_ amount: UInt8) {
        guard !staged.isEmpty else { return }
        if amount == 0 {
            while !staged.isEmpty {
                let count = min(staged.count, TLSEngine.maximumRecordPlaintext)
                let before = wire.count
                forge(22, Array(staged.prefix(count)))
                guard wire.count > before else { return }
                staged.removeFirst(count)
            }
            return
        }
        let count = min(staged.count, amount < 128 ? Int(amount) : (Int(amount) - 127) * 128)
        let before = wire.count
        forge(22, Array(staged.prefix(count)))
        if wire.count > before { staged.removeFirst(count) }
    }

    /// A NewSessionTicket as a TLS 1.3 server sends it (RFC 8446 §4.6.1).
    private static func ticket(lifetime: UInt8, nonceLength: Int, ticketLength: Int, earlyData: Bool) -> [UInt8] {
        var body: [UInt8] = [0, 0, lifetime, 0]  // ticket_lifetime, up to 65,280 s
        body += [0x5A, 0xC3, 0x0F, 0x96]  // ticket_age_add
        body += [UInt8(nonceLength)] + [UInt8](repeating: 0x4E, count: nonceLength)
        body += [UInt8(ticketLength >> 8), UInt8(ticketLength & 0xFF)] + (0..<ticketLength).map { UInt8(truncatingIfNeeded: $0) }
        let extensions: [UInt8] = earlyData ? [0, 42, 0, 4, 0, 0, 0x40, 0] : []  // early_data, max_early_data_size
        body += [0, UInt8(extensions.count)] + extensions
        return [4, UInt8(body.count >> 16), UInt8(body.count >> 8 & 0xFF), UInt8(body.count & 0xFF)] + body
    }

    // MARK: Reading

    private func deliver(_ count: Int) {
        guard count > 0 else { return }
        let piece = wire[delivered..<(delivered + count)]
        delivered += count
        inbound.append(ByteBuffer(bytes: piece))
        subject.receive(piece)
        // Follow the authentic records that have now wholly arrived.
        let intact = min(delivered, tamperedFrom)
        while followed < records.count, records[followed].end <= intact {
            policies.follow(records[followed].inner, record: followed)
            followed += 1
        }
    }

    private func read(capacity: Int) {
        let keyUpdatesBefore = layer.keyUpdatesReceived
        readLibrary(capacity: capacity)
        precondition(layer.keyUpdatesReceived >= keyUpdatesBefore && layer.keyUpdatesReceived <= policies.keyUpdates.count,
                     "the library took a KeyUpdate the peer did not send")
        let previous = subjectState
        subjectState = TLSDifferentialRun.State(rawValue: subject.read(capacity: capacity, into: &subjectRead).rawValue)!
        precondition(parted || previous == .open || subjectState == previous, "OpenSSL went from \(previous) to \(subjectState)")
        drainSubjectQueue()
        if subject.failed { subjectState = .failed }
        checkWrites()
        compareReads()
    }

    private func readLibrary(capacity: Int) {
        var destination = [UInt8](repeating: 0, count: capacity)
        while true {
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            destination.withUnsafeMutableBytes { raw in
                outcome = Result { () throws(SecurityError) in try layer.read(from: &inbound, into: raw, output: &libraryOutput) }
            }
            switch outcome {
            case .failure:
                precondition(libraryState != .closed, "the library failed after close_notify")
                libraryState = .failed
            case .success(.bytes(let count)):
                precondition(libraryState == .open, "the library read data after it \(libraryState)")
                precondition(count > 0 && count <= capacity, "the library read \(count) bytes into \(capacity)")
                libraryRead += destination[..<count]
                continue
            case .success(.closed):
                precondition(libraryState != .failed, "the library read close_notify after a failure")
                libraryState = .closed
            case .success(.wouldBlock):
                precondition(libraryState == .open, "the library would block after it \(libraryState)")
            }
            return
        }
    }

    /// Library requests read: the request flags of the KeyUpdates it took, in the order sent.
    private var libraryRequestsRead: Int { policies.keyUpdates.prefix(layer.keyUpdatesReceived).filter { $0 }.count }

    private func compareReads() {
        guard !parted else { return }
        if libraryState == subjectState && libraryRead.count == subjectRead.count {
            precondition(libraryRead[compared...].elementsEqual(subjectRead[compared...]), "the two read different bytes")
            // Failed or closed at the same record: each counts the records it opened, OpenSSL
            // where its message callback reports a record's inner content type.
            if libraryState != .open && !openSSLStoppedWhereTheLibraryDid() {
                guard explain() else {
                    preconditionFailure(
                        "both \(libraryState), the library after opening \(layer.recordsOpened) records, OpenSSL after "
                            + "\(subject.observer.recordsOpened); \(followed) records followed")
                }
                return
            }
            compared = libraryRead.count
            libraryAhead = false
            subjectFailedWhileWriting = false
            if libraryState != .failed {
                precondition(layer.keyUpdatesReceived == subject.observer.keyUpdatesRead.count, "the two took different KeyUpdates")
            } else if !libraryWrites.closeNotify && !subjectWrites.closeNotify && libraryWrites.fatalAlert != subjectWrites.fatalAlert {
                // They may have failed at different records: the library by a policy, OpenSSL later.
                guard explain() || explainAlert() else {
                    preconditionFailure("one side answered a failure with an alert and the other did not")
                }
            }
            return
        }
        guard explain() else {
            preconditionFailure(
                "the library read \(libraryRead.count) bytes and is \(libraryState); OpenSSL read \(subjectRead.count) and is \(subjectState); "
                    + "\(delivered) of \(wire.count) wire bytes delivered, \(followed) records followed; OpenSSL opened "
                    + "\(subject.observer.recordsOpened) records, read \(subject.observer.keyUpdatesRead.count) KeyUpdates, has "
                    + "\(subject.unreadInput) bytes unread, \(subject.isInInit ? "is" : "is not") inside a handshake message")
        }
    }

    /// The records the library opened, as OpenSSL would count them: OpenSSL before 3.2 reports
    /// an authentic record's inner type before it finds the content over 16 KiB; the library
    /// and 3.2 on refuse such a record first.
    private var libraryRecordsAsOpenSSLCounts: Int {
        let opened = layer.recordsOpened
        guard Self.openSSLReportsOversizedRecords, libraryState == .failed, opened < records.count,
            records[opened].end <= min(delivered, tamperedFrom),
            let typeIndex = records[opened].inner.lastIndex(where: { $0 != 0 }), typeIndex > TLSEngine.maximumRecordPlaintext,
            opened == 0 || rerunLibrary(through: records[opened - 1].end) != .failed  // it failed at that record, not the one before
        else { return opened }
        return opened + 1
    }

    /// OpenSSL opened as many records as the library, or, where it left a header unjudged
    /// after a KeyUpdate answer, judged it on opening the next record.
    private func openSSLStoppedWhereTheLibraryDid() -> Bool {
        let library = libraryRecordsAsOpenSSLCounts
        let openSSL = subject.observer.recordsOpened
        if openSSL == library { return true }
        guard openSSL == library + 1, libraryState == .failed, let refused = policies.refusedHeader, refused.afterKeyUpdateRequest,
            refused.record + 1 == layer.recordsOpened
        else { return false }
        if usedPolicies.last != .headerAfterKeyUpdateAnswer { usedPolicies.append(.headerAfterKeyUpdateAnswer) }
        return true
    }

    private static let openSSLReportsOversizedRecords = OpenSSL_version_num() < 0x3020_0000

    /// A difference of reads that a documented policy explains; false if none does.
    private func explain() -> Bool {
        for allowance in policies.allowances where records[allowance.record].end <= delivered {
            let record = records[allowance.record]
            let prefix = allowance.dataBefore
            switch allowance.kind {
            case .libraryFails:
                guard libraryState == .failed, libraryRead.count == prefix, subjectRead.count >= prefix,
                    subjectRead[..<prefix].elementsEqual(libraryRead)
                else { continue }
                // It failed at exactly that record, not before.
                precondition(rerunLibrary(through: record.start) != .failed, "the library failed before the record its \(allowance.policy) policy fails")
                precondition(rerunLibrary(through: record.end) == .failed, "the library did not fail at the record its \(allowance.policy) policy fails")
            case .openSSLMayFail:
                // Only OpenSSL fails there: the library must get through the record. OpenSSL
                // judges a header that came just after a KeyUpdate request on the next record.
                let judgedLate = allowance.afterKeyUpdateRequest && subject.observer.recordsOpened == allowance.record + 2
                guard subjectState == .failed, subject.observer.recordsOpened == allowance.record + 1 || judgedLate, subjectRead.count == prefix,
                    libraryRead.count >= prefix, libraryRead[..<prefix].elementsEqual(subjectRead),
                    rerunLibrary(through: record.end) != .failed
                else { continue }
                if judgedLate { usedPolicies.append(.headerAfterKeyUpdateAnswer) }
            case .alertsDiffer:
                continue  // both fail there: explainAlert() judges it
            }
            usedPolicies.append(allowance.policy)
            parted = true
            return true
        }
        // The library judges a record by its header; OpenSSL waits for a short record's body.
        if libraryState == .failed, subjectState == .open, libraryRead.count == subjectRead.count,
            libraryRead[compared...].elementsEqual(subjectRead[compared...]), let partial = partialRecord(),
            partial.length <= TLSRecordProtection.tagLength
        {
            precondition(rerunLibrary(through: partial.start) != .failed, "the library failed before a short record header")
            return libraryIsAhead(.shortRecordHeader)
        }
        // OpenSSL, owing a KeyUpdate answer when a handshake message's header comes, sends
        // the answer and leaves the header unjudged until another record arrives: the last
        // record followed holds a header both must refuse, right after a KeyUpdate request.
        if libraryState == .failed, subjectState == .open, libraryRead.count == subjectRead.count,
            libraryRead[compared...].elementsEqual(subjectRead[compared...]), followed > 0,
            subject.observer.recordsOpened == followed, subject.unreadInput == 0, !subject.isInInit,
            let refused = policies.refusedHeader, refused.record == followed - 1, refused.afterKeyUpdateRequest
        {
            let record = records[followed - 1]
            precondition(rerunLibrary(through: record.start) != .failed && rerunLibrary(through: record.end) == .failed,
                         "the library did not fail on the handshake record OpenSSL has yet to judge")
            return libraryIsAhead(.headerAfterKeyUpdateAnswer)
        }
        return false
    }

    private func libraryIsAhead(_ policy: TLSDifferentialPolicy) -> Bool {
        compared = libraryRead.count
        if !libraryAhead { usedPolicies.append(policy) }
        libraryAhead = true
        return true
    }

    /// Both failed at a record where a policy has only one of them answer with an alert.
    private func explainAlert() -> Bool {
        for allowance in policies.allowances where allowance.kind == .alertsDiffer && subject.observer.recordsOpened == allowance.record + 1 {
            let record = records[allowance.record]
            precondition(rerunLibrary(through: record.start) != .failed && rerunLibrary(through: record.end) == .failed,
                         "the library did not fail at the record its \(allowance.policy) policy fails")
            usedPolicies.append(allowance.policy)
            parted = true
            return true
        }
        return false
    }

    /// The record the delivered bytes end inside, after its header: where it starts and its length.
    private func partialRecord() -> (start: Int, length: Int)? {
        var start = 0
        while start + 5 <= delivered {
            let length = Int(wire[start + 3]) << 8 | Int(wire[start + 4])
            if start + 5 + length > delivered { return (start, length) }
            start += 5 + length
        }
        return nil
    }

    /// A fresh record layer with the same keys, reading the first `count` wire bytes at once.
    private func rerunLibrary(through count: Int) -> TLSDifferentialRun.State {
        let layer: TLSRecordLayer
        do {
            layer = try Self.makeLayer(suite: suite, isClient: isClient, client: clientSecret, server: serverSecret, recordsPerKeyUpdate: recordsPerKeyUpdate)
        } catch {
            fatalError("record layer set-up failed: \(error)")
        }
        var inbound = CiphertextQueue()
        var output = ByteBuffer()
        if count > 0 { inbound.append(ByteBuffer(bytes: wire[..<count])) }
        var destination = [UInt8](repeating: 0, count: 65_536)
        while true {
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            destination.withUnsafeMutableBytes { raw in
                outcome = Result { () throws(SecurityError) in try layer.read(from: &inbound, into: raw, output: &output) }
            }
            switch outcome {
            case .failure: return .failed
            case .success(.bytes): continue
            case .success(.closed): return .closed
            case .success(.wouldBlock): return .open
            }
        }
    }

    // MARK: Writing

    private func send(_ content: [UInt8]) {
        drainSubjectQueue()
        let initiatedBefore = layer.keyUpdatesInitiated
        let libraryTook = content.withUnsafeBytes { raw in
            (try? layer.sealApplicationData(raw, UnsafeRawBufferPointer(start: nil, count: 0), into: &libraryOutput)) != nil
        }
        if libraryTook { libraryWrites.accepted += content }
        // OpenSSL is told to start a KeyUpdate where the library's record limit starts one.
        if layer.keyUpdatesInitiated > initiatedBefore { subjectQueue.append(PendingWrite(kind: .keyUpdate, libraryTook: nil)) }
        subjectQueue.append(PendingWrite(kind: .data(content), libraryTook: libraryTook))
        drainSubjectQueue()
        checkWrites()
    }

    private func close() {
        drainSubjectQueue()
        let libraryTook = layer.acceptsWrites
        layer.sealCloseNotify(into: &libraryOutput)
        subjectQueue.append(PendingWrite(kind: .close, libraryTook: libraryTook))
        drainSubjectQueue()
        checkWrites()
    }

    /// Writes held back, in order, for as long as OpenSSL takes them; each is compared with the
    /// library's when OpenSSL takes or refuses it.
    private func drainSubjectQueue() {
        while var next = subjectQueue.first {
            let outcome: OpenSSLEndpoint.WriteOutcome
            let inInit = subject.isInInit && !subject.failed
            switch next.kind {
            case .data(let content): outcome = subject.write(content)
            case .keyUpdate: outcome = subject.requestKeyUpdate()
            case .close: outcome = subject.closeNotify()
            }
            if outcome == .wouldBlock && !subject.failed {
                // Policy: OpenSSL reads the rest of a handshake message before it writes.
                precondition(inInit, "OpenSSL held back a write outside a handshake message")
                next.waited = true
                subjectQueue[0] = next
                if !parted, usedPolicies.last != .writeWaitsForHandshakeMessage { usedPolicies.append(.writeWaitsForHandshakeMessage) }
                return
            }
            subjectQueue.removeFirst()
            if outcome == .accepted, case .data(let content) = next.kind { subjectWrites.accepted += content }
            compareWrite(next, subjectTook: outcome == .accepted, whileInInit: inInit)
            if subject.failed {
                // What OpenSSL held back behind the message it failed on is lost with it.
                for lost in subjectQueue { compareWrite(lost, subjectTook: false, whileInInit: true) }
                subjectQueue.removeAll()
                if libraryState != .failed { subjectFailedWhileWriting = true }
                return
            }
        }
    }

    /// A write both were given: taken by both or refused by both, unless a policy explains it.
    private func compareWrite(_ write: PendingWrite, subjectTook: Bool, whileInInit: Bool) {
        guard !parted, let libraryTook = write.libraryTook, libraryTook != subjectTook else { return }
        writesDiffer = true
        if libraryTook {
            // OpenSSL held it behind a handshake message, or read the rest of one to write it,
            // and failed on that message; the library fails on the same record when it reads.
            precondition(subject.failed && (write.waited || whileInInit || subjectFailedWhileWriting), "OpenSSL refused a write the library took")
        } else {
            precondition(libraryAhead, "the library refused a write OpenSSL took")
        }
    }

    /// Opens what each side wrote, and hands the library's to the OpenSSL peer.
    private func checkWrites() {
        libraryWrites.noteRequestsRead(libraryRequestsRead)
        subjectWrites.noteRequestsRead(subject.observer.keyUpdatesRead.filter { $0 == 1 }.count)
        if libraryOutput.readableBytes > 0 {
            let bytes = Array(libraryOutput.readableBytesView)
            libraryOutput.clear()
            libraryWrites.open(bytes)
            peer.receive(bytes[...])
        }
        subjectWrites.open(subject.takeOutput())
        // OpenSSL, as the peer, reads all the library wrote and ends as its last record says.
        if peerState == .open {
            peerState = peer.read(capacity: 16_384, into: &peerRead)
        }
        _ = peer.takeOutput()  // its own answers go nowhere
        precondition(peerRead == libraryWrites.accepted, "the OpenSSL peer read other data than the library took")
        let expected: OpenSSLEndpoint.ReadState = libraryWrites.fatalAlert ? .failed : libraryWrites.closeNotify ? .closed : .open
        precondition(peerState == expected, "the OpenSSL peer is \(peerState) after the library's records, not \(expected)")
    }
}
