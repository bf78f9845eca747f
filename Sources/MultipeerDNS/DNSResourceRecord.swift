/// A resource record of the answer, authority or additional section (RFC 1035 §4.1.3).
public struct DNSResourceRecord: Hashable, Sendable {
    public var name: DNSName
    /// Must agree with `data` unless `data` is `.other`; the encoder checks.
    public var type: DNSRecordType
    /// The top bit of RRCLASS: the record replaces cached ones of its name and type (RFC 6762 §10.2).
    public var cacheFlush: Bool
    /// The low 15 bits of RRCLASS; 1 is IN.
    public var recordClass: UInt16
    public var ttl: UInt32
    public var data: DNSRecordData

    /// The type comes from `data`, which must not be `.other` (that needs `init(name:type:...)`).
    public init(name: DNSName, ttl: UInt32, data: DNSRecordData, cacheFlush: Bool = false, recordClass: UInt16 = 1) {
        guard let type = data.impliedType else {
            preconditionFailure("DNSResourceRecord: .other data needs init(name:type:ttl:data:) to say its type")
        }
        self.init(name: name, type: type, ttl: ttl, data: data, cacheFlush: cacheFlush, recordClass: recordClass)
    }

    public init(
        name: DNSName, type: DNSRecordType, ttl: UInt32, data: DNSRecordData, cacheFlush: Bool = false,
        recordClass: UInt16 = 1
    ) {
        self.name = name
        self.type = type
        self.cacheFlush = cacheFlush
        self.recordClass = recordClass
        self.ttl = ttl
        self.data = data
    }
}
