/// The RDATA of a resource record, decoded for the types DNS-SD uses and kept raw for the rest.
public enum DNSRecordData: Hashable, Sendable {
    /// IPv4 address in host order (10.0.0.1 is 0x0A000001).
    case a(UInt32)
    /// IPv6 address, exactly 16 bytes.
    case aaaa([UInt8])
    case ptr(DNSName)
    case srv(priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)
    /// Character-strings of 0...255 bytes each. An empty list is sent as one zero-length string
    /// (RFC 6763 §6.1), and that, like an empty rdata, decodes to `[]`.
    case txt([[UInt8]])
    /// Next name and type bitmap (RFC 4034 §4.1); every window is decoded, mDNS uses only window 0.
    case nsec(next: DNSName, types: Set<DNSRecordType>)
    /// Any other type, rdata as it came (at most 65,535 bytes). Names inside are not decompressed.
    case other([UInt8])

    /// The type this data belongs to; nil for `.other`, which fits any type.
    var impliedType: DNSRecordType? {
        switch self {
        case .a: .a
        case .aaaa: .aaaa
        case .ptr: .ptr
        case .srv: .srv
        case .txt: .txt
        case .nsec: .nsec
        case .other: nil
        }
    }
}
