/// A resource record TYPE (RFC 1035 §3.2.2), open to any 16-bit value.
public struct DNSRecordType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let a = DNSRecordType(rawValue: 1)
    public static let ptr = DNSRecordType(rawValue: 12)
    public static let txt = DNSRecordType(rawValue: 16)
    public static let aaaa = DNSRecordType(rawValue: 28)
    public static let srv = DNSRecordType(rawValue: 33)
    public static let nsec = DNSRecordType(rawValue: 47)
    /// Only in questions: every type the responder has for the name.
    public static let any = DNSRecordType(rawValue: 255)

    /// The mnemonic, or `TYPEn` for others (RFC 3597 §5).
    public var description: String {
        switch self {
        case .a: "A"
        case .ptr: "PTR"
        case .txt: "TXT"
        case .aaaa: "AAAA"
        case .srv: "SRV"
        case .nsec: "NSEC"
        case .any: "ANY"
        default: "TYPE\(rawValue)"
        }
    }
}
