/// A domain name: labels of raw bytes (mDNS uses UTF-8, RFC 6762 §16). Equality and hashing
/// ignore ASCII case (RFC 1035 §2.3.3); the original case is kept for encoding.
///
/// Every value is valid: each label is 1...63 bytes and the wire form is at most 255 bytes.
public struct DNSName: Hashable, Sendable, CustomStringConvertible {
    public let labels: [[UInt8]]

    /// For labels already checked (the decoder's, suffixes of valid names).
    init(uncheckedLabels labels: [[UInt8]]) {
        self.labels = labels
    }

    public init(labels: [[UInt8]]) throws(DNSError) {
        var length = 1
        for label in labels {
            guard (1...DNSLimits.maxLabelLength).contains(label.count) else {
                throw DNSError(.invalidLabel, "a label is \(label.count) bytes, allowed 1-\(DNSLimits.maxLabelLength)")
            }
            length += 1 + label.count
            // Inside the loop, so a huge array of labels is refused without walking all of it.
            guard length <= DNSLimits.maxNameLength else {
                throw DNSError(.nameTooLong, "name is over \(DNSLimits.maxNameLength) bytes in wire form")
            }
        }
        self.labels = labels
    }

    /// Splits on "." with no escaping; a trailing dot is optional, and "" or "." is the root.
    /// Use `init(labels:)` or `prepending(_:)` for labels that contain dots.
    public init(_ dotted: String) throws(DNSError) {
        var utf8 = Array(dotted.utf8)
        if utf8.last == UInt8(ascii: ".") { utf8.removeLast() }
        guard !utf8.isEmpty else {
            self = .root
            return
        }
        // Bounded before splitting: a long string cannot make a long array of labels.
        guard utf8.count + 2 <= DNSLimits.maxNameLength else {
            throw DNSError(.nameTooLong, "name is \(utf8.count + 2) bytes in wire form, allowed \(DNSLimits.maxNameLength)")
        }
        let labels = utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
        try self.init(labels: labels)
    }

    public static let root = DNSName(uncheckedLabels: [])

    public func prepending(_ label: [UInt8]) throws(DNSError) -> DNSName {
        try DNSName(labels: [label] + labels)
    }

    /// `label` is one label, dots included.
    public func prepending(_ label: String) throws(DNSError) -> DNSName {
        try prepending(Array(label.utf8))
    }

    /// Whether `self` is `other` or a name below it, ignoring ASCII case.
    public func isSubdomain(of other: DNSName) -> Bool {
        guard other.labels.count <= labels.count else { return false }
        return Self.labelsEqual(labels.suffix(other.labels.count), other.labels[...])
    }

    /// The wire form's length: a length byte per label, the label bytes, the final zero.
    var encodedLength: Int {
        labels.reduce(1) { $0 + 1 + $1.count }
    }

    /// Dotted, without a trailing dot ("." for the root); "." and "\" inside labels are written
    /// "\." and "\\". Labels are read as UTF-8, ill-formed bytes becoming U+FFFD.
    public var description: String {
        guard !labels.isEmpty else { return "." }
        return labels.map { label in
            var escaped: [UInt8] = []
            escaped.reserveCapacity(label.count)
            for byte in label {
                if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "\\") { escaped.append(UInt8(ascii: "\\")) }
                escaped.append(byte)
            }
            return String(decoding: escaped, as: UTF8.self)
        }.joined(separator: ".")
    }

    public static func == (lhs: DNSName, rhs: DNSName) -> Bool {
        labelsEqual(lhs.labels[...], rhs.labels[...])
    }

    public func hash(into hasher: inout Hasher) {
        Self.hashLabels(labels[...], into: &hasher)
    }

    // Shared with the encoder's compression table, which keys on suffixes without copying them.

    static func labelsEqual(_ lhs: ArraySlice<[UInt8]>, _ rhs: ArraySlice<[UInt8]>) -> Bool {
        lhs.count == rhs.count
            && zip(lhs, rhs).allSatisfy { left, right in
                left.count == right.count && zip(left, right).allSatisfy { lowercased($0) == lowercased($1) }
            }
    }

    static func hashLabels(_ labels: ArraySlice<[UInt8]>, into hasher: inout Hasher) {
        hasher.combine(labels.count)
        for label in labels {
            hasher.combine(label.count)
            for byte in label { hasher.combine(lowercased(byte)) }
        }
    }

    /// ASCII only: bytes of multi-byte UTF-8 sequences are all above 0x7F and stay as they are.
    private static func lowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }
}
