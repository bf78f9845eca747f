import MultipeerWire
import MultipeerProtocol

/// How `send(_:toPeers:with:)` delivers data (Apple's raw values).
public enum MCSessionSendDataMode: Int, Sendable, CaseIterable {
    /// Ordered, exactly once, over the peer's TLS connection.
    case reliable = 0
    /// Sealed UDP datagrams: may be lost or reordered, never duplicated.
    case unreliable = 1
}

/// A peer's place in a session (Apple's raw values).
public enum MCSessionState: Int, Sendable, CaseIterable, CustomStringConvertible {
    case notConnected = 0
    case connecting = 1
    case connected = 2

    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected: "connected"
        }
    }
}

/// Whether a session encrypts (Apple's raw values). The outcome for every pair is in docs/PROTOCOL.md §4.
public enum MCEncryptionPreference: Int, Sendable, CaseIterable {
    /// Encrypt when the peer allows it.
    case optional = 0
    /// Never connect without encryption.
    case required = 1
    /// Do not encrypt, unless an identity on either side demands authentication.
    case none = 2

    var wire: WireEncryptionPreference {
        switch self {
        case .optional: .optional
        case .required: .required
        case .none: .none
        }
    }

    init(_ wire: WireEncryptionPreference) {
        switch wire {
        case .optional: self = .optional
        case .required: self = .required
        case .none: self = .none
        }
    }
}

/// The fewest peers a session can hold, the local one included.
public let kMCSessionMinimumNumberOfPeers: Int = 2
/// The most peers a session can hold, the local one included.
public let kMCSessionMaximumNumberOfPeers: Int = WireLimits.maxSessionMembers
