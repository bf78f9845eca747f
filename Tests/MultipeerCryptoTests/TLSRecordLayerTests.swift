@testable import MultipeerCrypto
import NIOCore
import Testing

/// A record layer with random traffic secrets, and the peer's keys, so that tests can forge any
/// record the peer could send and open what the layer sends back.
final class ForgingPeer {
    let layer: TLSRecordLayer
    /// Seals as the peer.
    let forger: TLSRecordProtection
    /// Opens what the layer seals.
    let opener: TLSRecordProtection
    var inbound = CiphertextQueue()
    /// What the layer wrote (answers, alerts, data).
    var output = ByteBuffer()

    init(role: TLSEngine.Role = .server, suite: TLSCipherSuite = .aes128GCMSHA256, recordsPerKeyUpdate: UInt64 = 1 << 24) throws {
        let client = SecureBytes(randomCount: suite.hashLength)
        let server = SecureBytes(randomCount: suite.hashLength)
        layer = try TLSRecordLayer(suite: suite, role: role, clientSecret: client, serverSecret: server, recordsPerKeyUpdate: recordsPerKeyUpdate)
        forger = try TLSRecordProtection(suite: suite, secret: role == .server ? client : server, sealing: true)
        opener = try TLSRecordProtection(suite: suite, secret: role == .server ? server : client, sealing: false)
    }

    /// One record as the peer would seal it. With `type` 0 the content carries its own type and padding.
    func forge(_ type: UInt8, _ content: [UInt8]) throws -> ByteBuffer {
        var record = ByteBuffer()
        try content.withUnsafeBytes { try forger.seal(contentType: type, $0, into: &record) }
        return record
    }

    /// A KeyUpdate as the peer sends it: sealed under its current key, which then moves on.
    func forgeKeyUpdate(requesting: Bool) throws -> ByteBuffer {
        let record = try forge(22, [24, 0, 0, 1, requesting ? 1 : 0])
        try forger.update()
        return record
    }

    func deliver(_ bytes: ByteBuffer) { inbound.append(bytes) }

    /// Reads until nothing more is waiting, `capacity` bytes at a time.
    func readAll(capacity: Int = 65_536) throws(SecurityError) -> (data: [UInt8], closed: Bool) {
        var data: [UInt8] = []
        var destination = [UInt8](repeating: 0, count: capacity)
        while true {
            var outcome = Result<TLSEngine.ReadStatus, SecurityError>.success(.wouldBlock)
            destination.withUnsafeMutableBytes { raw in
                outcome = Result { () throws(SecurityError) in try layer.read(from: &inbound, into: raw, output: &output) }
            }
            let status = try outcome.get()
            switch status {
            case .bytes(let count): data += destination[..<count]
            case .wouldBlock: return (data, false)
            case .closed: return (data, true)
            }
        }
    }

    /// Opens every record the layer wrote, following its KeyUpdates.
    func replies() throws -> [(type: UInt8, content: [UInt8])] {
        var opened: [(type: UInt8, content: [UInt8])] = []
        while output.readableBytes > 0 {
            let length = Int(try #require(output.getInteger(at: output.readerIndex + 3, as: UInt16.self)))
            let bytes = output.readBytes(length: 5 + length)
            let record = try #require(bytes)
            var plaintext = [UInt8](repeating: 0, count: length)
            let innerLength = record.withUnsafeBytes { raw in plaintext.withUnsafeMutableBytes { opener.open(raw, into: $0.baseAddress!) } }
            let inner = try #require(innerLength)
            let content = Array(plaintext[..<inner]).reversed().drop { $0 == 0 }.reversed()
            let type = try #require(content.last)
            opened.append((type, Array(content.dropLast())))
            if type == 22, content.first == 24 { try opener.update() }
        }
        return opened
    }
}

@Suite("TLS record layer: records a hostile peer could send")
struct TLSRecordLayerTests {
    private func expectFailure(_ peer: ForgingPeer, containing reason: String, alert: UInt8?) throws {
        #expect {
            _ = try peer.readAll()
        } throws: { error in
            "\(error)".contains(reason)
        }
        let replies = try peer.replies()
        if let alert {
            #expect(replies.map(\.type) == [21])
            #expect(replies.first?.content == [2, alert])
        } else {
            #expect(replies.isEmpty)
        }
        // The failure sticks: nothing more is read from this connection.
        peer.deliver(try peer.forge(23, Array("later".utf8)))
        #expect(throws: SecurityError.self) { _ = try peer.readAll() }
    }

    @Test func paddingAfterTheContentTypeIsRemoved() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(0, Array("hi".utf8) + [23, 0, 0, 0]))
        #expect(try peer.readAll().data == Array("hi".utf8))
    }

    @Test func emptyApplicationDataRecordsAreSkipped() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(23, []))
        peer.deliver(try peer.forge(23, Array("a".utf8)))
        #expect(try peer.readAll().data == Array("a".utf8))
    }

    @Test func aRecordOfPaddingAloneIsRefused() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(0, [0, 0, 0]))
        try expectFailure(peer, containing: "no content type", alert: TLSRecordLayer.Alert.unexpectedMessage)
    }

    @Test func contentOver16KiBIsRefusedWithinTheCiphertextLimit() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(0, [UInt8](repeating: 7, count: 16_385) + [23]))
        try expectFailure(peer, containing: "16385 bytes of content", alert: TLSRecordLayer.Alert.recordOverflow)
    }

    @Test(arguments: [5, 11, 28])
    func aTamperedRecordFails(flippedOffset: Int) throws {
        let peer = try ForgingPeer()
        var record = try peer.forge(23, Array("payload".utf8))
        let byte = try #require(record.getInteger(at: flippedOffset, as: UInt8.self))
        record.setInteger(byte ^ 1, at: flippedOffset)
        peer.deliver(record)
        try expectFailure(peer, containing: "failed to authenticate", alert: TLSRecordLayer.Alert.badRecordMAC)
    }

    @Test func aKeyUpdateMovesTheReadKeyAndOldKeyRecordsFail() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(23, Array("one".utf8)))
        peer.deliver(try peer.forgeKeyUpdate(requesting: false))
        peer.deliver(try peer.forge(23, Array("two".utf8)))
        #expect(try peer.readAll().data == Array("onetwo".utf8))
        #expect(peer.layer.keyUpdatesReceived == 1)
        #expect(try peer.replies().isEmpty)  // not requested: no answer

        // A record the peer seals under the key it had before its next KeyUpdate fails once
        // the KeyUpdate has been read.
        let before = try ForgingPeer()
        var oldKey = ByteBuffer()
        let update = try before.forge(22, [24, 0, 0, 1, 0])
        try Array("old".utf8).withUnsafeBytes { try before.forger.seal(contentType: 23, $0, into: &oldKey) }
        before.deliver(update)
        before.deliver(oldKey)
        try expectFailure(before, containing: "failed to authenticate", alert: TLSRecordLayer.Alert.badRecordMAC)
    }

    @Test func aKeyUpdateMustEndItsRecord() throws {
        let peer = try ForgingPeer(role: .client)
        peer.deliver(try peer.forge(22, [24, 0, 0, 1, 0] + [4, 0, 0, 0]))
        try expectFailure(peer, containing: "after a KeyUpdate", alert: TLSRecordLayer.Alert.unexpectedMessage)
    }

    @Test(arguments: [
        ([24, 0, 0, 1, 2] as [UInt8], "KeyUpdate request 2", TLSRecordLayer.Alert.illegalParameter),
        ([24, 0, 0, 2, 0, 0], "KeyUpdate of 2 bytes", TLSRecordLayer.Alert.decodeError),
        ([13, 0, 0, 1, 0], "handshake message 13", TLSRecordLayer.Alert.unexpectedMessage),
        ([4, 0, 0, 1, 0], "handshake message 4", TLSRecordLayer.Alert.unexpectedMessage),  // a ticket, sent to a server
    ])
    func malformedOrUnexpectedHandshakeMessagesAreRefused(message: [UInt8], reason: String, alert: UInt8) throws {
        let peer = try ForgingPeer(role: .server)
        peer.deliver(try peer.forge(22, message))
        try expectFailure(peer, containing: reason, alert: alert)
    }

    /// Found by fuzz-tls-differential: the layer waited for the whole of a message it would
    /// refuse (up to 64 KiB of it), where OpenSSL fails on its header.
    @Test(arguments: [
        (TLSEngine.Role.server, [4, 0, 0, 200] as [UInt8], "handshake message 4", TLSRecordLayer.Alert.unexpectedMessage),
        (.client, [13, 0, 1, 0], "handshake message 13", TLSRecordLayer.Alert.unexpectedMessage),
        (.client, [24, 0, 0, 2], "KeyUpdate of 2 bytes", TLSRecordLayer.Alert.decodeError),
    ])
    func anUnwantedHandshakeMessageFailsAtItsHeader(role: TLSEngine.Role, header: [UInt8], reason: String, alert: UInt8) throws {
        let peer = try ForgingPeer(role: role)
        peer.deliver(try peer.forge(22, header))  // the body never comes
        try expectFailure(peer, containing: reason, alert: alert)
    }

    /// Requests, even each behind data of its own, make the layer write nothing while it reads:
    /// a peer that never reads cannot grow what this side has to send. One answer goes ahead of
    /// the layer's next record.
    @Test func requestedKeyUpdatesAreAnsweredOnceAheadOfTheNextRecord() throws {
        let peer = try ForgingPeer()
        var stream = ByteBuffer()
        for index in 0..<100 {
            var request = try peer.forgeKeyUpdate(requesting: true)
            stream.writeBuffer(&request)
            var data = try peer.forge(23, [UInt8(index)])
            stream.writeBuffer(&data)
        }
        peer.deliver(stream)
        #expect(try peer.readAll().data == (0..<100).map { UInt8($0) })
        #expect(peer.layer.keyUpdatesReceived == 100)
        #expect(peer.output.readableBytes == 0)
        try Array("after".utf8).withUnsafeBytes { try peer.layer.sealApplicationData($0, UnsafeRawBufferPointer(start: nil, count: 0), into: &peer.output) }
        #expect(peer.layer.keyUpdatesSent == 1)
        #expect(try peer.replies().map(\.content) == [[24, 0, 0, 1, 0], Array("after".utf8)])
        peer.deliver(try peer.forge(23, Array("still".utf8)))
        #expect(try peer.readAll().data == Array("still".utf8))
    }

    @Test(arguments: ["KeyUpdate", "empty", "ticket", "user_canceled"])
    func recordsWithoutDataAreCutOffPastTheLimit(kind: String) throws {
        let peer = try ForgingPeer(role: .client)
        func useless() throws -> ByteBuffer {
            switch kind {
            case "KeyUpdate": try peer.forgeKeyUpdate(requesting: false)
            case "empty": try peer.forge(23, [])
            case "ticket": try peer.forge(22, [4, 0, 0, 1, 0])
            default: try peer.forge(21, [1, 90])
            }
        }
        // Up to the limit, and data resets the count...
        for _ in 0..<TLSRecordLayer.maximumRecordsWithoutData { peer.deliver(try useless()) }
        peer.deliver(try peer.forge(23, [1]))
        for _ in 0..<TLSRecordLayer.maximumRecordsWithoutData { peer.deliver(try useless()) }
        #expect(try peer.readAll().data == [1])
        // ...but one more in a row ends the connection.
        peer.deliver(try useless())
        try expectFailure(peer, containing: "records in a row without application data", alert: TLSRecordLayer.Alert.unexpectedMessage)
    }

    /// The cipher writes its output before it checks the tag; a record that fails must leave
    /// none of that in the caller's buffer, whether the buffer has room for the whole inner
    /// plaintext or only its content (the type byte then goes aside).
    @Test(arguments: [1_000, 64])
    func aForgedRecordLeavesNoPlaintextInTheCallersBuffer(capacity: Int) throws {
        let peer = try ForgingPeer()
        var record = try peer.forge(23, [UInt8](repeating: 0x41, count: 64))
        let last = record.writerIndex - 1
        record.setInteger(record.getInteger(at: last, as: UInt8.self)! ^ 1, at: last)
        peer.deliver(record)
        var destination = [UInt8](repeating: 0xEE, count: capacity)
        var failed = false
        destination.withUnsafeMutableBytes { raw in
            do { _ = try peer.layer.read(from: &peer.inbound, into: raw, output: &peer.output) } catch { failed = true }
        }
        #expect(failed)
        #expect(!destination.contains(0x41))
        #expect(peer.layer.recordsOpenedAside == 0)
    }

    @Test func ticketsAreDroppedEvenWhenSplitAcrossRecords() throws {
        let peer = try ForgingPeer(role: .client)
        let ticket: [UInt8] = [4, 0, 1, 44] + [UInt8](repeating: 9, count: 300)
        peer.deliver(try peer.forge(22, Array(ticket[..<2])))
        peer.deliver(try peer.forge(22, Array(ticket[2..<100])))
        peer.deliver(try peer.forge(22, Array(ticket[100...]) + ticket))  // the rest, and a second whole ticket
        peer.deliver(try peer.forge(23, Array("data".utf8)))
        #expect(try peer.readAll().data == Array("data".utf8))
    }

    @Test func aPostHandshakeMessageOverTheLimitIsRefusedFromItsHeader() throws {
        let peer = try ForgingPeer(role: .client)
        let length = TLSRecordLayer.maximumHandshakeMessageLength + 1
        peer.deliver(try peer.forge(22, [4, UInt8(length >> 16), UInt8((length >> 8) & 0xff), UInt8(length & 0xff)]))
        try expectFailure(peer, containing: "message of \(length) bytes", alert: TLSRecordLayer.Alert.unexpectedMessage)
    }

    @Test func applicationDataInsideAHandshakeMessageIsRefused() throws {
        let peer = try ForgingPeer(role: .client)
        peer.deliver(try peer.forge(22, [4, 0, 1, 0, 1, 2]))
        peer.deliver(try peer.forge(23, Array("x".utf8)))
        try expectFailure(peer, containing: "inside a handshake message", alert: TLSRecordLayer.Alert.unexpectedMessage)
    }

    @Test func closeNotifyEndsReadingForGood() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(23, Array("last".utf8)))
        peer.deliver(try peer.forge(21, [1, 0]))
        peer.deliver(try peer.forge(23, Array("ignored".utf8)))
        let first = try peer.readAll()
        #expect(first.data == Array("last".utf8))
        #expect(first.closed)
        peer.deliver(try peer.forge(23, Array("also ignored".utf8)))
        #expect(try peer.readAll() == ([], true))
    }

    @Test func userCanceledIsNotAnEnd() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(21, [1, 90]))
        peer.deliver(try peer.forge(23, Array("more".utf8)))
        #expect(try peer.readAll() == (Array("more".utf8), false))
    }

    @Test func aFatalAlertFailsReadingAndGetsNoAlertBack() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(21, [2, 40]))
        try expectFailure(peer, containing: "alert 40", alert: nil)
    }

    @Test(arguments: [
        ([21, 1, 0, 0] as [UInt8], 21 as UInt8, "alert record of 3 bytes"),
        ([], 22, "empty handshake record"),
        ([1], 20, "content type 20"),
        ([1], 99, "content type 99"),
    ])
    func malformedContentIsRefused(content: [UInt8], type: UInt8, reason: String) throws {
        let peer = try ForgingPeer()
        // For the alert, type 0 lets the content carry its own type after three bytes.
        let record = type == 21 ? try peer.forge(0, Array(content.dropFirst()) + [21]) : try peer.forge(type, content)
        peer.deliver(record)
        let alert = type == 21 ? TLSRecordLayer.Alert.decodeError : TLSRecordLayer.Alert.unexpectedMessage
        try expectFailure(peer, containing: reason, alert: alert)
    }

    @Test(arguments: [
        ([22, 3, 3, 0, 20] as [UInt8], "record type 22", TLSRecordLayer.Alert.unexpectedMessage),
        ([23, 3, 1, 0, 20], "record version 3.1", TLSRecordLayer.Alert.decodeError),
        ([23, 3, 3, 0x41, 0x01], "a record of 16641 bytes", TLSRecordLayer.Alert.recordOverflow),
        ([23, 3, 3, 0, 16], "a record of 16 bytes", TLSRecordLayer.Alert.decodeError),
    ])
    func badHeadersFailBeforeTheirBodiesArrive(header: [UInt8], reason: String, alert: UInt8) throws {
        let peer = try ForgingPeer()
        peer.deliver(ByteBuffer(bytes: header))
        try expectFailure(peer, containing: reason, alert: alert)
    }

    @Test(arguments: [1, 7, 16_384])
    func recordsSplitAnywhereReadTheSame(capacity: Int) throws {
        let peer = try ForgingPeer()
        let contents: [[UInt8]] = [[1], [UInt8](repeating: 2, count: 16_384), (0..<500).map { UInt8($0 & 0xff) }]
        var wire = ByteBuffer()
        for content in contents {
            var record = try peer.forge(23, content)
            wire.writeBuffer(&record)
        }
        // One byte per received buffer: headers and bodies are joined from many pieces, and the
        // queue joins its buffers rather than keep one per byte.
        while let byte = wire.readSlice(length: 1) {
            peer.deliver(byte)
            #expect(peer.inbound.bufferCount < CiphertextQueue.joinThreshold)
        }
        #expect(try peer.readAll(capacity: capacity).data == contents.flatMap { $0 })
        #expect(peer.inbound.byteCount == 0)
        // Whole records went through the layer's scratch buffers; an idle connection keeps none.
        #expect(peer.layer.scratchCapacity <= 3 * 4_096)
    }

    /// A record whose content exactly fills the caller's buffer is opened straight into it, its
    /// type byte set aside; with padding the type byte is in the buffer. Either way, no copy.
    @Test(arguments: [1, 100, 16_384])
    func aRecordThatExactlyFillsTheBufferIsOpenedStraightIntoIt(count: Int) throws {
        let peer = try ForgingPeer()
        let content = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 13 | 1) }
        peer.deliver(try peer.forge(23, content))
        #expect(try peer.readAll(capacity: count).data == content)
        // One byte of padding (forge appends it): the type byte lands in the buffer, the padding aside.
        peer.deliver(try peer.forge(0, content.dropLast() + [23]))
        #expect(try peer.readAll(capacity: count).data == Array(content.dropLast()))
        #expect(peer.layer.recordsOpenedAside == 0)
        // A record one byte larger than that does not fit: it is opened aside and copied.
        peer.deliver(try peer.forge(0, content + [23]))
        #expect(try peer.readAll(capacity: count).data == content)
        #expect(peer.layer.recordsOpenedAside == 1)
    }

    /// A KeyUpdate whose bytes exactly fill the caller's buffer is opened straight into it: it
    /// must still be taken for a KeyUpdate (the read key moves on), never handed over as data.
    @Test func aKeyUpdateThatFillsTheBufferIsNotData() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forgeKeyUpdate(requesting: false))
        peer.deliver(try peer.forge(23, [9, 8, 7, 6, 5]))
        #expect(try peer.readAll(capacity: 5).data == [9, 8, 7, 6, 5])
        #expect(peer.layer.keyUpdatesReceived == 1)
        #expect(peer.layer.recordsOpenedAside == 0)
    }

    /// Two bytes of padding after the type byte: the record fills the buffer with its content,
    /// type byte and first padding byte (the last is set aside), still opens straight into it,
    /// and only the content is handed over; the type is found behind the padding in the buffer.
    @Test(arguments: [1, 100, 16_381])
    func paddingOfTwoBytesIsFoundInTheBufferWhenTheRecordFillsIt(count: Int) throws {
        let peer = try ForgingPeer()
        let content = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 | 1) }
        // forge appends one byte of padding to what it is given: the first is ours.
        peer.deliver(try peer.forge(0, content + [23, 0]))
        #expect(try peer.readAll(capacity: count + 2).data == content)
        #expect(peer.layer.recordsOpenedAside == 0)
    }

    /// An alert whose two bytes fill the buffer is read from it, its type byte set aside.
    @Test func anAlertThatFillsTheBufferIsRead() throws {
        let peer = try ForgingPeer()
        peer.deliver(try peer.forge(21, [1, 0]))
        #expect(try peer.readAll(capacity: 2).closed)
        #expect(peer.layer.recordsOpenedAside == 0)
    }

    @Test(arguments: [TLSCipherSuite.aes128GCMSHA256, .aes256GCMSHA384, .chacha20Poly1305SHA256])
    func everySuiteSealsWhatTheOtherSideOpens(suite: TLSCipherSuite) throws {
        let peer = try ForgingPeer(suite: suite, recordsPerKeyUpdate: 2)
        for index in 0..<5 {
            try [UInt8(index)].withUnsafeBytes { try peer.layer.sealApplicationData($0, UnsafeRawBufferPointer(start: nil, count: 0), into: &peer.output) }
        }
        let replies = try peer.replies()
        #expect(replies.filter { $0.type == 23 }.map(\.content) == (0..<5).map { [UInt8($0)] })
        #expect(replies.filter { $0.type == 22 }.map(\.content) == [[24, 0, 0, 1, 1], [24, 0, 0, 1, 1]])
        #expect(peer.layer.keyUpdatesInitiated == 2)
    }

    @Test func writesAfterCloseNotifyAreRefused() throws {
        let peer = try ForgingPeer()
        peer.layer.sealCloseNotify(into: &peer.output)
        peer.layer.sealCloseNotify(into: &peer.output)  // once only
        #expect(try peer.replies().map(\.content) == [[1, 0]])
        #expect(throws: SecurityError.self) {
            try [1].withUnsafeBytes { try peer.layer.sealApplicationData($0, UnsafeRawBufferPointer(start: nil, count: 0), into: &peer.output) }
        }
    }
}
