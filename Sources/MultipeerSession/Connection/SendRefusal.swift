import MultipeerCrypto
import MultipeerWire

/// Why a connection's `send(_:)` refused a frame. A struct rather than an enum, so that new
/// reasons can be added without breaking callers: switch over `code`.
public struct SendRefusal: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable { case notConnected, invalidFrame, tls, unsupported, channelRule, channelEnded }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        public static let notConnected = Code(.notConnected)
        public static let invalidFrame = Code(.invalidFrame)
        public static let tls = Code(.tls)
        /// Frames only the machine itself sends (HELLO, TRUST, PONG).
        public static let unsupported = Code(.unsupported)
        /// A channel frame that breaks docs/PROTOCOL.md §7.6 from our side: the peer would take it
        /// as a violation, so it is not sent.
        public static let channelRule = Code(.channelRule)
        /// A frame for one of our channels that has ended since it was queued (the peer's reset,
        /// cancel or RESOURCE_RECEIVED was read in the same batch): not sent, and not a bug.
        public static let channelEnded = Code(.channelEnded)

        public var description: String { "\(base)" }
    }

    public let code: Code
    public let wireError: WireError?
    public let securityError: SecurityError?
    public let frameType: FrameType?
    public let rule: String?

    private init(
        _ code: Code, wireError: WireError? = nil, securityError: SecurityError? = nil, frameType: FrameType? = nil, rule: String? = nil
    ) {
        self.code = code
        self.rule = rule
        self.wireError = wireError
        self.securityError = securityError
        self.frameType = frameType
    }

    public static let notConnected = SendRefusal(.notConnected)
    public static func invalidFrame(_ error: WireError) -> SendRefusal { SendRefusal(.invalidFrame, wireError: error) }
    public static func tls(_ error: SecurityError) -> SendRefusal { SendRefusal(.tls, securityError: error) }
    public static func unsupported(_ type: FrameType) -> SendRefusal { SendRefusal(.unsupported, frameType: type) }
    public static func channelRule(_ rule: String) -> SendRefusal { SendRefusal(.channelRule, rule: rule) }
    public static func channelEnded(_ rule: String) -> SendRefusal { SendRefusal(.channelEnded, rule: rule) }

    public var description: String {
        switch code {
        case .invalidFrame: "invalid frame: \(wireError.map { "\($0)" } ?? "?")"
        case .tls: "TLS: \(securityError.map { "\($0)" } ?? "?")"
        case .unsupported: "unsupported frame \(frameType.map { "\($0)" } ?? "?")"
        case .channelRule: "channel rule: \(rule ?? "?")"
        case .channelEnded: "channel ended: \(rule ?? "?")"
        default: "\(code)"
        }
    }
}
