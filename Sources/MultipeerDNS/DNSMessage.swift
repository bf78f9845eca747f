/// One DNS message (RFC 1035 §4.1) as mDNS and DNS-SD use it (RFC 6762, RFC 6763).
///
/// The header bits mDNS ignores (RD, RA, Z, AD, CD; RFC 6762 §18) are dropped on decoding and
/// sent as zero.
public struct DNSMessage: Hashable, Sendable {
    /// 0 for mDNS multicast.
    public var id: UInt16
    /// QR.
    public var isResponse: Bool
    /// 4 bits; 0 (QUERY) in mDNS.
    public var opcode: UInt8
    /// AA.
    public var isAuthoritative: Bool
    /// TC: in a query, more known answers follow in the next packet (RFC 6762 §7.2).
    public var isTruncated: Bool
    /// RCODE, 4 bits.
    public var responseCode: UInt8
    public var questions: [DNSQuestion]
    public var answers: [DNSResourceRecord]
    public var authorities: [DNSResourceRecord]
    public var additionals: [DNSResourceRecord]

    public init(
        id: UInt16 = 0, isResponse: Bool, isAuthoritative: Bool = false, isTruncated: Bool = false,
        questions: [DNSQuestion] = [], answers: [DNSResourceRecord] = [], authorities: [DNSResourceRecord] = [],
        additionals: [DNSResourceRecord] = []
    ) {
        self.id = id
        self.isResponse = isResponse
        self.opcode = 0
        self.isAuthoritative = isAuthoritative
        self.isTruncated = isTruncated
        self.responseCode = 0
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }
}

// Header flag bits (RFC 1035 §4.1.1).
extension DNSMessage {
    static let responseFlag: UInt16 = 0x8000
    static let authoritativeFlag: UInt16 = 0x0400
    static let truncatedFlag: UInt16 = 0x0200
    static let opcodeShift: UInt16 = 11
    /// The top bit of QCLASS (unicast response) and of RRCLASS (cache flush).
    static let classTopBit: UInt16 = 0x8000
}
