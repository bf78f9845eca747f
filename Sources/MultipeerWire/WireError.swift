/// A violation of the wire protocol, naming the rule that was broken.
///
/// `code` is a struct over a private enum so that new codes never break callers' switches.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case badMagic, unsupportedVersion, unknownFrameType, disallowedFlags, nonZeroReserved
            case invalidChannel, invalidLength, truncated, trailingBytes, invalidValue
            case invalidUTF8, limitExceeded
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Not this protocol (preamble or connection data magic).
        public static let badMagic = Code(.badMagic)
        /// A version this implementation does not speak.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        public static let unknownFrameType = Code(.unknownFrameType)
        /// A flag bit the frame type does not define.
        public static let disallowedFlags = Code(.disallowedFlags)
        public static let nonZeroReserved = Code(.nonZeroReserved)
        /// Channel 0 where a channel is required, or the reverse; or a channel number the
        /// connection's channel state does not allow (parity, order, not open: §7.6).
        public static let invalidChannel = Code(.invalidChannel)
        /// A length outside the bounds the spec gives for this field or frame.
        public static let invalidLength = Code(.invalidLength)
        /// The bytes end before the structure does.
        public static let truncated = Code(.truncated)
        public static let trailingBytes = Code(.trailingBytes)
        /// A field holds a value the spec does not define (enum value, zero port, ...).
        public static let invalidValue = Code(.invalidValue)
        public static let invalidUTF8 = Code(.invalidUTF8)
        /// A count or size above a protocol limit.
        public static let limitExceeded = Code(.limitExceeded)

        public var description: String { "\(base)" }
    }

    public let code: Code
    /// Which rule, in words; never contains payload bytes.
    public let rule: String

    public init(_ code: Code, _ rule: String) {
        self.code = code
        self.rule = rule
    }

    /// What the receiver sends before closing (docs/PROTOCOL.md §10).
    public var goodbyeReason: GoodbyeReason {
        code == .limitExceeded ? .limitExceeded : .protocolError
    }

    public var description: String { "wire protocol violation (\(code)): \(rule)" }
}
