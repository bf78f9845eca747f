import NIOCore

/// TLS 1.3 after the handshake (RFC 8446 §4.6, §5, §6): application data sealed and opened with
/// the traffic keys OpenSSL's handshake derived, KeyUpdate in both directions, the session
/// tickets a server may send (ignored: the library never resumes), and alerts.
///
/// Records are opened straight from the received buffers into the caller's buffer, and sealed
/// straight from the caller's bytes into the outbound buffer: no copy beyond the cipher's own
/// pass (but for a record split across received buffers, or whose content is larger than the
/// caller's buffer, copied once), and none of OpenSSL's per-record machinery around it.
package final class TLSRecordLayer {
    /// Post-handshake handshake messages are held until whole, up to this size. A session ticket
    /// is the only large one a peer may send, and real ones are a few hundred bytes.
    package static let maximumHandshakeMessageLength = 65_536
    /// Records in a row that carry no application data (KeyUpdates, tickets, empty records,
    /// user_canceled) before the peer is cut off: each costs work and yields nothing. OpenSSL
    /// allows 32 empty records in a row.
    package static let maximumRecordsWithoutData = 32

    private enum ContentType {
        static let alert: UInt8 = 21
        static let handshake: UInt8 = 22
        static let applicationData: UInt8 = 23
    }

    private enum HandshakeType {
        static let newSessionTicket: UInt8 = 4
        static let keyUpdate: UInt8 = 24
    }

    /// Alert descriptions this side sends or treats specially (§6).
    package enum Alert {
        package static let closeNotify: UInt8 = 0
        package static let unexpectedMessage: UInt8 = 10
        package static let badRecordMAC: UInt8 = 20
        package static let recordOverflow: UInt8 = 22
        package static let illegalParameter: UInt8 = 47
        package static let decodeError: UInt8 = 50
        package static let userCanceled: UInt8 = 90
    }

    /// A failure of the peer's records, with the alert it earns.
    private struct Violation: Error {
        let alert: UInt8?
        let reason: String
    }

    private let role: TLSEngine.Role
    private let reader: TLSRecordProtection
    private let writer: TLSRecordProtection
    let recordsPerKeyUpdate: UInt64
    @exclusivity(unchecked) private var recordsSinceKeyUpdate: UInt64 = 0

    // Exclusivity unchecked on the mutable state: see TLSEngine.
    /// The opened content of a record that did not fit the caller's buffer.
    @exclusivity(unchecked) private var opened = ByteBuffer()
    /// A record that arrived split across received buffers, joined to be opened.
    @exclusivity(unchecked) private var joined = ByteBuffer()
    /// Post-handshake handshake messages, until whole.
    @exclusivity(unchecked) private var handshakeMessages = ByteBuffer()
    /// The peer asked for a KeyUpdate in return. It goes out ahead of the next application data
    /// (§4.6.3), so one answers any number of requests, and a peer that sends requests but never
    /// reads cannot make this side write.
    @exclusivity(unchecked) private var owesKeyUpdate = false
    @exclusivity(unchecked) private var recordsWithoutData = 0
    /// The first failure, reading or writing; every later call fails with it.
    @exclusivity(unchecked) private var failure: SecurityError?
    @exclusivity(unchecked) private var peerClosed = false
    @exclusivity(unchecked) private var closeNotifySent = false

    package private(set) var keyUpdatesInitiated = 0
    package private(set) var keyUpdatesSent = 0
    package private(set) var keyUpdatesReceived = 0
    /// Records opened with a content type TLS 1.3 has, failed on or not: the point OpenSSL
    /// reports a record's inner type, so the differential fuzz target can tell where both stopped.
    package private(set) var recordsOpened = 0
    /// Records opened into scratch storage because the caller's buffer was too small, whose
    /// content is then copied out (for tests: bulk frames cost one per frame).
    package private(set) var recordsOpenedAside = 0

    package init(
        suite: TLSCipherSuite, role: TLSEngine.Role, clientSecret: SecureBytes, serverSecret: SecureBytes, recordsPerKeyUpdate: UInt64
    ) throws(SecurityError) {
        self.role = role
        self.recordsPerKeyUpdate = recordsPerKeyUpdate
        writer = try TLSRecordProtection(suite: suite, secret: role == .client ? clientSecret : serverSecret, sealing: true)
        reader = try TLSRecordProtection(suite: suite, secret: role == .client ? serverSecret : clientSecret, sealing: false)
    }

    // MARK: Sealing

    /// False once close_notify is sent or anything failed.
    package var acceptsWrites: Bool { !closeNotifySent && failure == nil }

    /// Seals one record of application data (at most 16 KiB, in one or two pieces), preceded by
    /// a KeyUpdate when one is owed or the record limit is reached.
    package func sealApplicationData(_ content: UnsafeRawBufferPointer, _ more: UnsafeRawBufferPointer, into output: inout ByteBuffer) throws(SecurityError) {
        guard acceptsWrites else { throw failure ?? SecurityError(.tlsFailure, "write after close_notify") }
        do {
            if owesKeyUpdate {
                owesKeyUpdate = false
                try sendKeyUpdate(requestingOne: false, into: &output)
            }
            if recordsSinceKeyUpdate >= recordsPerKeyUpdate {
                try sendKeyUpdate(requestingOne: true, into: &output)
                keyUpdatesInitiated += 1
            }
            try writer.seal(contentType: ContentType.applicationData, content, more, into: &output)
            recordsSinceKeyUpdate += 1
        } catch {
            // A KeyUpdate sealed but not applied, or a record missing from the sequence: the
            // connection cannot go on.
            failure = error
            throw error
        }
    }

    /// Queues close_notify, once.
    package func sealCloseNotify(into output: inout ByteBuffer) {
        guard !closeNotifySent, failure == nil else { return }
        closeNotifySent = true
        sealAlert(Alert.closeNotify, into: &output)
    }

    private func sealAlert(_ description: UInt8, into output: inout ByteBuffer) {
        // Level: warning for close_notify, fatal otherwise (§6: the level is otherwise ignored).
        let alert: [UInt8] = [description == Alert.closeNotify ? 1 : 2, description]
        alert.withUnsafeBytes { try? writer.seal(contentType: ContentType.alert, $0, into: &output) }
    }

    private func sendKeyUpdate(requestingOne: Bool, into output: inout ByteBuffer) throws(SecurityError) {
        let message: (UInt8, UInt8, UInt8, UInt8, UInt8) = (HandshakeType.keyUpdate, 0, 0, 1, requestingOne ? 1 : 0)
        var outcome: Result<Void, SecurityError> = .success(())
        withUnsafeBytes(of: message) { raw in
            outcome = Result { () throws(SecurityError) in try writer.seal(contentType: ContentType.handshake, raw, into: &output) }
        }
        try outcome.get()
        try writer.update()
        recordsSinceKeyUpdate = 0
        keyUpdatesSent += 1
    }

    // MARK: Opening

    /// Opens received records into `destination` until application data fills some of it or
    /// no whole record is left. `output` gets a fatal alert when the peer's records fail.
    package func read(
        from inbound: inout CiphertextQueue, into destination: UnsafeMutableRawBufferPointer, output: inout ByteBuffer
    ) throws(SecurityError) -> TLSEngine.ReadStatus {
        if let failure { throw failure }
        do {
            return try openRecords(from: &inbound, into: destination)
        } catch let violation as Violation {
            let error = SecurityError(.tlsFailure, violation.reason)
            failure = error
            if let alert = violation.alert, !closeNotifySent { sealAlert(alert, into: &output) }
            inbound.removeAll()
            throw error
        } catch let error as SecurityError {
            failure = error
            throw error
        } catch {
            preconditionFailure("unexpected error \(error)")
        }
    }

    private func openRecords(from inbound: inout CiphertextQueue, into destination: UnsafeMutableRawBufferPointer) throws -> TLSEngine.ReadStatus {
        if opened.readableBytes > 0 { return .bytes(takeOpened(into: destination)) }
        while true {
            if peerClosed { return .closed }
            guard let length = try nextRecordLength(in: inbound) else { return .wouldBlock }
            let recordLength = TLSRecordProtection.headerLength + length
            // Straight into the caller's buffer when the content fits, with its type byte or,
            // when only the content fits, with the type byte set aside.
            let direct = destination.count > 0 && destination.count >= length - TLSRecordProtection.tagLength - 1
            if !direct { recordsOpenedAside += 1 }
            let content: (type: UInt8, length: Int)
            if let contiguous = try inbound.withContiguousPrefix(recordLength, { (record) throws(Violation) in
                try open(record, direct: direct, destination: destination)
            }) {
                content = contiguous
                inbound.skip(recordLength)
            } else {
                joined.clear()
                joined.writeWithUnsafeMutableBytes(minimumWritableBytes: recordLength) { raw in
                    inbound.read(into: UnsafeMutableRawBufferPointer(rebasing: raw[..<recordLength]))
                }
                content = try joined.withUnsafeReadableBytes { record in
                    try open(record, direct: direct, destination: destination)
                }
                Self.release(&joined)
            }
            guard (ContentType.alert...ContentType.applicationData).contains(content.type) else {
                throw Violation(alert: Alert.unexpectedMessage, reason: "record content type \(content.type) after the handshake")
            }
            recordsOpened += 1
            if content.type == ContentType.applicationData, content.length > 0 {
                recordsWithoutData = 0
            } else {
                recordsWithoutData += 1
                guard recordsWithoutData <= Self.maximumRecordsWithoutData else {
                    throw Violation(
                        alert: Alert.unexpectedMessage, reason: "more than \(Self.maximumRecordsWithoutData) records in a row without application data")
                }
            }
            switch content.type {
            case ContentType.applicationData:
                guard handshakeMessages.readableBytes == 0 else {
                    throw Violation(alert: Alert.unexpectedMessage, reason: "application data inside a handshake message")
                }
                if content.length == 0 { continue }
                if direct { return .bytes(content.length) }
                return .bytes(takeOpened(into: destination))
            case ContentType.handshake:
                try withContent(content.length, direct: direct, destination: destination) { try handleHandshake($0) }
            case ContentType.alert:
                try withContent(content.length, direct: direct, destination: destination) { try handleAlert($0) }
            default:
                preconditionFailure("content type \(content.type) passed the check above")
            }
        }
    }

    /// Moves what `opened` holds into `destination`, as far as it reaches.
    private func takeOpened(into destination: UnsafeMutableRawBufferPointer) -> Int {
        let count = min(destination.count, opened.readableBytes)
        opened.readWithUnsafeReadableBytes { raw in
            destination.baseAddress!.copyMemory(from: raw.baseAddress!, byteCount: count)
            return count
        }
        if opened.readableBytes == 0 { Self.release(&opened) }
        return count
    }

    /// Scratch buffers this large are dropped once used, so an idle connection holds none.
    private static let retainedScratchCapacity = 4_096

    private static func release(_ buffer: inout ByteBuffer) {
        if buffer.capacity > retainedScratchCapacity { buffer = ByteBuffer() } else { buffer.clear() }
    }

    /// Opened content waiting to be read.
    var openedByteCount: Int { opened.readableBytes }

    /// Bytes of scratch storage held between reads (for tests).
    var scratchCapacity: Int { opened.capacity + joined.capacity + handshakeMessages.capacity }

    /// The next record's body length once it has wholly arrived, after checking its header.
    private func nextRecordLength(in inbound: CiphertextQueue) throws -> Int? {
        var header: (UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0)
        let complete = withUnsafeMutableBytes(of: &header) { inbound.peek(into: $0) }
        guard complete else { return nil }
        guard header.0 == TLSRecordProtection.outerContentType else {
            throw Violation(alert: Alert.unexpectedMessage, reason: "record type \(header.0) after the handshake")
        }
        guard header.1 == 3, header.2 == 3 else {
            throw Violation(alert: Alert.decodeError, reason: "record version \(header.1).\(header.2)")
        }
        let length = Int(header.3) << 8 | Int(header.4)
        guard length <= TLSRecordProtection.maximumCiphertextLength else {
            throw Violation(alert: Alert.recordOverflow, reason: "a record of \(length) bytes")
        }
        guard length > TLSRecordProtection.tagLength else {
            throw Violation(alert: Alert.decodeError, reason: "a record of \(length) bytes holds no content type")
        }
        return inbound.byteCount >= TLSRecordProtection.headerLength + length ? length : nil
    }

    /// Opens `record` into the destination (`direct`) or into `opened`; returns the inner
    /// content type and the content's length.
    private func open(_ record: UnsafeRawBufferPointer, direct: Bool, destination: UnsafeMutableRawBufferPointer) throws(Violation) -> (type: UInt8, length: Int) {
        let innerLength = record.count - TLSRecordProtection.headerLength - TLSRecordProtection.tagLength
        if direct, destination.count >= innerLength {
            return try Self.unwrap(reader.open(record, into: destination.baseAddress!), at: destination.baseAddress!).get()
        }
        if direct {
            // Room for the content only: the last inner byte goes aside.
            var last: UInt8 = 0
            return try Self.unwrap(reader.open(record, into: destination.baseAddress!, last: &last), at: destination.baseAddress!, last: last).get()
        }
        opened.clear()
        var outcome = Result<(type: UInt8, length: Int), Violation>.failure(Violation(alert: nil, reason: "no record opened"))
        opened.writeWithUnsafeMutableBytes(minimumWritableBytes: innerLength) { raw in
            outcome = Self.unwrap(reader.open(record, into: raw.baseAddress!), at: raw.baseAddress!)
            if case .success(let content) = outcome { return content.length }
            return 0
        }
        return try outcome.get()
    }

    /// Finds the content type behind the content and its zero padding (§5.4); with `last`, the
    /// inner plaintext's last byte is that one and the rest is at `plaintext`.
    private static func unwrap(_ innerLength: Int?, at plaintext: UnsafeMutableRawPointer, last: UInt8? = nil) -> Result<(type: UInt8, length: Int), Violation> {
        guard let innerLength else {
            return .failure(Violation(alert: Alert.badRecordMAC, reason: "a record failed to authenticate"))
        }
        var index = innerLength - 1
        if let last {
            if last != 0 { return checked(type: last, length: index) }
            index -= 1
        }
        while index >= 0, plaintext.load(fromByteOffset: index, as: UInt8.self) == 0 { index -= 1 }
        guard index >= 0 else { return .failure(Violation(alert: Alert.unexpectedMessage, reason: "a record with no content type")) }
        return checked(type: plaintext.load(fromByteOffset: index, as: UInt8.self), length: index)
    }

    private static func checked(type: UInt8, length: Int) -> Result<(type: UInt8, length: Int), Violation> {
        guard length <= TLSEngine.maximumRecordPlaintext else {
            return .failure(Violation(alert: Alert.recordOverflow, reason: "a record with \(length) bytes of content"))
        }
        return .success((type, length))
    }

    private func withContent(
        _ length: Int, direct: Bool, destination: UnsafeMutableRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        if direct {
            try body(UnsafeRawBufferPointer(rebasing: destination[..<length]))
        } else {
            let content = opened
            opened = ByteBuffer()
            try content.withUnsafeReadableBytes { try body($0) }
        }
    }

    private func handleHandshake(_ content: UnsafeRawBufferPointer) throws {
        guard content.count > 0 else { throw Violation(alert: Alert.unexpectedMessage, reason: "an empty handshake record") }
        guard handshakeMessages.readableBytes + content.count <= Self.maximumHandshakeMessageLength + 4 else {
            throw Violation(alert: Alert.unexpectedMessage, reason: "a post-handshake message over \(Self.maximumHandshakeMessageLength) bytes")
        }
        handshakeMessages.writeBytes(content)
        while handshakeMessages.readableBytes >= 4 {
            let start = handshakeMessages.readerIndex
            let type = handshakeMessages.getInteger(at: start, as: UInt8.self)!
            let length = Int(handshakeMessages.getInteger(at: start + 1, as: UInt8.self)!) << 16
                | Int(handshakeMessages.getInteger(at: start + 2, as: UInt16.self)!)
            // Judged by its header, so that a message this side would refuse is not waited for.
            switch type {
            case HandshakeType.newSessionTicket where role == .client:
                guard length <= Self.maximumHandshakeMessageLength else {
                    throw Violation(alert: Alert.unexpectedMessage, reason: "a post-handshake message of \(length) bytes")
                }
            case HandshakeType.keyUpdate:
                guard length == 1 else { throw Violation(alert: Alert.decodeError, reason: "a KeyUpdate of \(length) bytes") }
            default:
                throw Violation(alert: Alert.unexpectedMessage, reason: "handshake message \(type) after the handshake")
            }
            guard handshakeMessages.readableBytes >= 4 + length else { break }
            handshakeMessages.moveReaderIndex(forwardBy: 4)
            let body = handshakeMessages.readSlice(length: length)!
            guard type == HandshakeType.keyUpdate else { continue }  // resumption is off (§5); a ticket is dropped unread
            let request = body.getInteger(at: body.readerIndex, as: UInt8.self)!
            guard request <= 1 else { throw Violation(alert: Alert.illegalParameter, reason: "KeyUpdate request \(request)") }
            // The key changes after this record, so nothing may follow it in the record (§5.1).
            guard handshakeMessages.readableBytes == 0 else {
                throw Violation(alert: Alert.unexpectedMessage, reason: "data after a KeyUpdate in its record")
            }
            try reader.update()
            keyUpdatesReceived += 1
            if request == 1 { owesKeyUpdate = true }
        }
        if handshakeMessages.readableBytes == 0 { Self.release(&handshakeMessages) } else { handshakeMessages.discardReadBytes() }
    }

    private func handleAlert(_ content: UnsafeRawBufferPointer) throws {
        guard handshakeMessages.readableBytes == 0 else {
            throw Violation(alert: Alert.unexpectedMessage, reason: "an alert inside a handshake message")
        }
        // One alert per record, never split (§5.1).
        guard content.count == 2 else { throw Violation(alert: Alert.decodeError, reason: "an alert record of \(content.count) bytes") }
        switch content[1] {
        case Alert.closeNotify: peerClosed = true
        case Alert.userCanceled: break  // a close_notify is to follow
        default: throw Violation(alert: nil, reason: "the peer sent TLS alert \(content[1])")
        }
    }
}
