/// Every cap a peer could push on the decoder, in one place. The encoder keeps to the same caps,
/// so it never emits what the decoder refuses.
public enum DNSLimits {
    /// The largest mDNS message, IP and UDP headers excluded (RFC 6762 §17).
    public static let maxMessageSize = 9_000
    /// A name in wire form, length bytes and the final zero included (RFC 1035 §2.3.4).
    public static let maxNameLength = 255
    public static let maxLabelLength = 63
    /// Compression pointers followed while reading one name.
    public static let maxPointerHops = 64
    /// Entries in each of the four sections.
    public static let maxRecordsPerSection = 256
    /// Character-strings in one TXT record.
    public static let maxTXTStrings = 256

    /// The fixed DNS header (RFC 1035 §4.1.1).
    static let headerLength = 12
}
