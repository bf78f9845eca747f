import MultipeerCrypto
import MultipeerWire

/// Why a connection's `send(_:)` refused a frame. A struct rather than an enum, so that new
/// reasons can be added without breaking callers: switch over `code`.
package struct SendRefusal: Error, Hashable, Sendable, CustomStringConvertible {
    package struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable { case notConnected, invalidFrame, tls, unsupported, channelRule, channelEnded }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        package static let notConnected = Code(.notConnected)
        package static let invalidFrame = Code(.invalidFrame)
        package static let tls = Code(.tls)
        /// Frames only the machine itself sends (HELLO, TRUST, PONG).
        package static let unsupported = Code(.unsupported)
        /// A channel frame that breaks docs/PROTOCOL.md §7.6 from our side: the peer would take it
        /// as a violation, so it is not sent.
        package static let channelRule = Code(.channelRule)
        /// A frame for one of our channels that has ended since it was queued (the peer's reset,
        /// cancel or RESOURCE_RECEIVED was read in the same batch): not sent, and not a bug.
        package static let channelEnded = Code(.channelEnded)

        package var description: String { "\(base)" }
    }

    package let code: Code
    package let wireError: WireError?
    package let securityError: SecurityError?
    package let frameType: FrameType?
    package let rule: String?

    private init(
        _ code: Code, wireError: WireError? = nil, securityError: SecurityError? = nil, frameType: FrameType? = nil, rule: String? = nil
    ) {
        self.code = code
        self.rule = rule
        self.wireError = wireError
        self.securityError = securityError
        self.frameType = frameType
    }

    package static let notConnected = SendRefusal(.notConnected)
    package static func invalidFrame(_ error: WireError) -> SendRefusal { SendRefusal(.invalidFrame, wireError: error) }
    package static func tls(_ error: SecurityError) -> SendRefusal { SendRefusal(.tls, securityError: error) }
    package static func unsupported(_ type: FrameType) -> SendRefusal { SendRefusal(.unsupported, frameType: type) }
    package static func channelRule(_ rule: String) -> SendRefusal { SendRefusal(.channelRule, rule: rule) }
    package static func channelEnded(_ rule: String) -> SendRefusal { SendRefusal(.channelEnded, rule: rule) }

    package var description: String {
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
