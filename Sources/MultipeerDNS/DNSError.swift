/// A malformed DNS message, or one over a limit, naming the rule that was broken.
///
/// `code` is a struct over a private enum so that new codes never break callers' switches.
public struct DNSError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case truncated, invalidLabel, nameTooLong, badPointer, invalidValue, limitExceeded, trailingBytes
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The message ends before the structure does.
        public static let truncated = Code(.truncated)
        /// A label of the reserved types 01 or 10, an empty label inside a name, or one over 63 bytes.
        public static let invalidLabel = Code(.invalidLabel)
        /// A name over 255 bytes in wire form, counted after decompression.
        public static let nameTooLong = Code(.nameTooLong)
        /// A compression pointer that does not point strictly backwards (forward, self, loop, into
        /// the header) or a name that needs more than `DNSLimits.maxPointerHops` of them.
        public static let badPointer = Code(.badPointer)
        /// A field holds a value the format does not allow (rdlength that does not fit its type, ...).
        public static let invalidValue = Code(.invalidValue)
        /// A count or size above a `DNSLimits` cap.
        public static let limitExceeded = Code(.limitExceeded)
        /// Bytes after the last record.
        public static let trailingBytes = Code(.trailingBytes)

        public var description: String { "\(base)" }
    }

    public let code: Code
    /// Which rule, in words; never contains payload bytes.
    public let rule: String

    public init(_ code: Code, _ rule: String) {
        self.code = code
        self.rule = rule
    }

    public var description: String { "malformed DNS message (\(code)): \(rule)" }
}
