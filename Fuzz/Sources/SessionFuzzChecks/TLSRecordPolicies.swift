import CMultipeerOpenSSL
import MultipeerCrypto

/// Where the library's record layer and OpenSSL's may part by documented policy
/// (Fuzz/README.md, fuzz-tls-differential). Anything else they must do alike.
public enum TLSDifferentialPolicy: String, Sendable {
    /// The library cuts a peer off at its 33rd record in a row without application data
    /// (`TLSRecordLayer.maximumRecordsWithoutData`: KeyUpdates, tickets, empty records,
    /// user_canceled, close_notify); OpenSSL counts only empty records (and warning alerts).
    case recordsWithoutData
    /// The library holds at most 65,536 bytes of one post-handshake message (and 65,540 bytes
    /// of messages at once); OpenSSL takes NewSessionTickets up to 131,338 bytes.
    case handshakeMessageLimit
    /// An alert between the records of one handshake message: the library fails, answering
    /// unexpected_message (RFC 8446 §5.1 forbids interleaving); OpenSSL, once it has the message's
    /// header, acts on the alert: it closes on close_notify, ignores user_canceled, and fails
    /// without an answer on any other.
    case alertInsideHandshakeMessage
    /// A NewSessionTicket to a client: the library drops it unread (it never resumes); OpenSSL
    /// parses it and fails on one it finds malformed.
    case ticketParsed
    /// OpenSSL fails at the 5th warning alert in a row, answering unexpected_message (3.0 counts
    /// user_canceled and any alert of level warning, 3.5 only user_canceled); the library counts
    /// user_canceled among its records without data.
    case warningAlerts
    /// A record header whose length leaves no room for a tag and a content type: the library
    /// fails at the header, OpenSSL waits for the body and fails then.
    case shortRecordHeader
    /// OpenSSL (3.0 and 3.5), owing a KeyUpdate answer when the header of the next handshake
    /// message comes, sends the answer and leaves the header unjudged until another record
    /// arrives; the library judges (and may refuse) it at once.
    case headerAfterKeyUpdateAnswer
    /// While OpenSSL holds part of a post-handshake message it reads the rest before it writes
    /// (SSL_write waits or fails with it, SSL_shutdown and SSL_key_update wait); the library
    /// writes at once.
    case writeWaitsForHandshakeMessage
}

/// One point where a documented policy lets the two part.
struct TLSPolicyAllowance {
    enum Kind {
        /// The library fails at this record; OpenSSL may go on.
        case libraryFails
        /// OpenSSL may fail at this record; the library goes on.
        case openSSLMayFail
        /// Both fail at this record, one answering with an alert and the other not.
        case alertsDiffer
    }

    let record: Int
    let policy: TLSDifferentialPolicy
    let kind: Kind
    /// Application data in the records before it.
    let dataBefore: Int
    /// Its handshake message's header came just after a KeyUpdate request, so OpenSSL judges
    /// it only when the next record arrives (`headerAfterKeyUpdateAnswer`).
    var afterKeyUpdateRequest = false
}

/// Post-handshake messages reassembled from handshake records (RFC 8446 §5.1): any number of
/// messages in a record, and a message across records.
struct HandshakeReassembler {
    private(set) var pending: [UInt8] = []

    var isEmpty: Bool { pending.isEmpty }
    var count: Int { pending.count }

    mutating func append(_ content: ArraySlice<UInt8>) { pending += content }

    /// The type and length of the message at the front, once its 4-byte header is in.
    var header: (type: UInt8, length: Int)? {
        guard pending.count >= 4 else { return nil }
        return (pending[0], Int(pending[1]) << 16 | Int(pending[2]) << 8 | Int(pending[3]))
    }

    /// The message at the front once whole, taken off.
    mutating func next() -> (type: UInt8, body: [UInt8])? {
        guard let header, pending.count >= 4 + header.length else { return nil }
        let body = Array(pending[4..<(4 + header.length)])
        pending.removeFirst(4 + header.length)
        return (header.type, body)
    }
}

/// Follows the authentic records the forger sent, as both implementations must read them, and
/// notes where a documented policy lets them part. It stops at the first record both must fail
/// on or the library must fail on; the library's own rules are those of `TLSRecordLayer`, and
/// OpenSSL's those of its ssl/record and ssl/statem code (3.0 and 3.5).
struct TLSRecordPolicies {
    private let isClient: Bool
    private let openSSLCountsWarningLevelAlerts: Bool
    private(set) var allowances: [TLSPolicyAllowance] = []
    /// The request_update flag of every KeyUpdate both must take, in order.
    private(set) var keyUpdates: [Bool] = []
    /// Application data in the records followed so far.
    private(set) var data = 0
    /// No record after the last one is read alike (one failed, or close_notify came).
    private(set) var finished = false
    /// The record whose handshake message header both must refuse, if one came, and whether
    /// the message just before that header was a KeyUpdate request.
    private(set) var refusedHeader: (record: Int, afterKeyUpdateRequest: Bool)?
    private var lastMessageWasKeyUpdateRequest = false
    private var recordsWithoutData = 0
    private var warningAlerts = 0
    private var handshake = HandshakeReassembler()

    /// OpenSSL's largest TLS 1.3 NewSessionTicket (SESSION_TICKET_MAX_LENGTH_TLS13).
    static let openSSLTicketLimit = 131_338

    init(isClient: Bool) {
        self.isClient = isClient
        // 3.5 counts only user_canceled towards its limit of warning alerts in TLS 1.3.
        openSSLCountsWarningLevelAlerts = OpenSSL_version_num() < 0x3050_0000
    }

    /// One authentic record, by its inner plaintext (content, type, padding).
    mutating func follow(_ inner: [UInt8], record: Int) {
        guard !finished else { return }
        // No type, too much content, or a type TLS 1.3 does not have: both fail.
        guard let typeIndex = inner.lastIndex(where: { $0 != 0 }), typeIndex <= TLSEngine.maximumRecordPlaintext,
            [21, 22, 23].contains(inner[typeIndex])
        else { return bothFail(at: record) }
        let content = inner[..<typeIndex]
        switch inner[typeIndex] {
        case 23: followData(content, record: record)
        case 22: followHandshake(content, record: record)
        default: followAlert(content, record: record)
        }
    }

    private mutating func finish() { finished = true }

    /// Both must fail at this record: nothing earlier in it (a ticket OpenSSL parses) may
    /// excuse OpenSSL failing while the library goes on.
    private mutating func bothFail(at record: Int) {
        allowances.removeAll { $0.record == record && $0.kind == .openSSLMayFail }
        finish()
    }

    private mutating func allow(
        _ policy: TLSDifferentialPolicy, _ kind: TLSPolicyAllowance.Kind, at record: Int, afterKeyUpdateRequest: Bool = false
    ) {
        allowances.append(
            TLSPolicyAllowance(record: record, policy: policy, kind: kind, dataBefore: data, afterKeyUpdateRequest: afterKeyUpdateRequest))
    }

    /// The library's count of records without application data; true when it cuts the peer off.
    private mutating func countWithoutData(record: Int) -> Bool {
        recordsWithoutData += 1
        guard recordsWithoutData > TLSRecordLayer.maximumRecordsWithoutData else { return false }
        allow(.recordsWithoutData, .libraryFails, at: record)
        finish()
        return true
    }

    private mutating func followData(_ content: ArraySlice<UInt8>, record: Int) {
        // Application data inside a handshake message: both fail.
        guard handshake.isEmpty else { return bothFail(at: record) }
        if content.isEmpty {
            // OpenSSL's limit of 32 empty records in a row is never below the library's.
            _ = countWithoutData(record: record)
        } else {
            recordsWithoutData = 0
            warningAlerts = 0
            data += content.count
        }
    }

    private mutating func followHandshake(_ content: ArraySlice<UInt8>, record: Int) {
        guard !content.isEmpty else { return bothFail(at: record) }  // both refuse an empty handshake record
        warningAlerts = 0
        if countWithoutData(record: record) { return }
        guard handshake.count + content.count <= TLSRecordLayer.maximumHandshakeMessageLength + 4 else {
            allow(.handshakeMessageLimit, .libraryFails, at: record)
            return finish()
        }
        handshake.append(content)
        while let header = handshake.header {
            // Judged on the header: the types this role takes after the handshake, and their sizes.
            switch header.type {
            case 24 where header.length == 1: break
            case 4 where isClient && header.length <= TLSRecordLayer.maximumHandshakeMessageLength: break
            case 4 where isClient && header.length <= Self.openSSLTicketLimit:
                allow(.handshakeMessageLimit, .libraryFails, at: record)
                return finish()
            default:
                refusedHeader = (record, lastMessageWasKeyUpdateRequest)
                return bothFail(at: record)
            }
            let headerAfterKeyUpdateRequest = lastMessageWasKeyUpdateRequest
            guard let message = handshake.next() else { return }
            lastMessageWasKeyUpdateRequest = message.type == 24 && message.body[0] == 1
            if message.type == 4 {
                allow(.ticketParsed, .openSSLMayFail, at: record, afterKeyUpdateRequest: headerAfterKeyUpdateRequest)
                continue
            }
            // A KeyUpdate: a known request value, and the last thing in its record.
            guard message.body[0] <= 1, handshake.isEmpty else { return bothFail(at: record) }
            keyUpdates.append(message.body[0] == 1)
        }
    }

    private mutating func followAlert(_ content: ArraySlice<UInt8>, record: Int) {
        guard handshake.isEmpty else {
            if handshake.header != nil, content.count == 2 {
                allow(.alertInsideHandshakeMessage, content.last == 0 || content.last == 90 ? .libraryFails : .alertsDiffer, at: record)
            }
            return finish()
        }
        if countWithoutData(record: record) { return }
        guard content.count == 2 else { return bothFail(at: record) }
        let level = content.first!
        let description = content.last!
        let closes = description == 0
        let ignored = description == 90
        if ignored || (openSSLCountsWarningLevelAlerts && level == 1) {
            warningAlerts += 1
            if warningAlerts == 5 {
                allow(.warningAlerts, closes || ignored ? .openSSLMayFail : .alertsDiffer, at: record)
            }
        }
        if closes {
            finish()
        } else if !ignored {
            bothFail(at: record)  // any other alert
        }
    }
}
