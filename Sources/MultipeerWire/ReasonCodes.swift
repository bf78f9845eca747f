// Open sets of u16 codes: a newer peer may send values this version does not name,
// and they are reported rather than treated as violations.

/// GOODBYE reasons (docs/PROTOCOL.md §6.4.6).
public struct GoodbyeReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let normal = GoodbyeReason(rawValue: 0)
    public static let protocolError = GoodbyeReason(rawValue: 1)
    public static let limitExceeded = GoodbyeReason(rawValue: 2)
    public static let flowControlError = GoodbyeReason(rawValue: 3)
    public static let downgradeDetected = GoodbyeReason(rawValue: 4)
    public static let trustRejected = GoodbyeReason(rawValue: 5)
    public static let timedOut = GoodbyeReason(rawValue: 6)
    public static let duplicateConnection = GoodbyeReason(rawValue: 7)
    public static let sessionFull = GoodbyeReason(rawValue: 8)
    public static let unknownToken = GoodbyeReason(rawValue: 9)
    public static let internalError = GoodbyeReason(rawValue: 10)

    private static let names = [
        "normal", "protocolError", "limitExceeded", "flowControlError", "downgradeDetected", "trustRejected",
        "timedOut", "duplicateConnection", "sessionFull", "unknownToken", "internalError",
    ]

    public var description: String {
        Int(rawValue) < Self.names.count ? Self.names[Int(rawValue)] : "other(\(rawValue))"
    }
}

/// STREAM_RESET codes (docs/PROTOCOL.md §6.4.12).
public struct StreamResetCode: RawRepresentable, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let cancelled = StreamResetCode(rawValue: 1)
    public static let internalError = StreamResetCode(rawValue: 2)
    public static let refused = StreamResetCode(rawValue: 3)
}

/// RESOURCE_CANCEL reasons (docs/PROTOCOL.md §6.4.17).
public struct ResourceCancelReason: RawRepresentable, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let cancelled = ResourceCancelReason(rawValue: 1)
    public static let integrityFailure = ResourceCancelReason(rawValue: 2)
    public static let storageFailure = ResourceCancelReason(rawValue: 3)
}
