/// An entry of the question section (RFC 1035 §4.1.2).
public struct DNSQuestion: Hashable, Sendable {
    public var name: DNSName
    public var type: DNSRecordType
    /// The top bit of QCLASS: the asker would like a unicast reply (QU, RFC 6762 §5.4).
    public var unicastResponse: Bool
    /// The low 15 bits of QCLASS; 1 is IN.
    public var recordClass: UInt16

    public init(name: DNSName, type: DNSRecordType, unicastResponse: Bool = false, recordClass: UInt16 = 1) {
        self.name = name
        self.type = type
        self.unicastResponse = unicastResponse
        self.recordClass = recordClass
    }
}
