import MultipeerWire

/// Why a stream or a resource transfer ended without success. A struct rather than an enum, so
/// that new reasons can be added without breaking callers: switch over `code`.
public struct TransferError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case notConnected, tooManyChannels, cancelled, cancelledByPeer, refusedByPeer, resetByPeer, connectionLost,
                integrityFailure, storageFailure, sourceFailure, tooLarge, invalidParameter
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        public static let notConnected = Code(.notConnected)
        /// 64 of our channels to this peer are open (docs/PROTOCOL.md §7.6).
        public static let tooManyChannels = Code(.tooManyChannels)
        /// This side cancelled (the app closed early or cancelled the Progress).
        public static let cancelled = Code(.cancelled)
        /// The peer cancelled (STREAM_RESET 1 or RESOURCE_CANCEL 1).
        public static let cancelledByPeer = Code(.cancelledByPeer)
        /// The peer did not take the stream or resource (STREAM_RESET 3).
        public static let refusedByPeer = Code(.refusedByPeer)
        /// The peer reset the stream for another reason (see `peerCode`).
        public static let resetByPeer = Code(.resetByPeer)
        /// The connection to the peer ended first.
        public static let connectionLost = Code(.connectionLost)
        /// A short transfer or a SHA-256 mismatch (RESOURCE_CANCEL 2).
        public static let integrityFailure = Code(.integrityFailure)
        /// The content could not be stored (RESOURCE_CANCEL 3, or a local disk error).
        public static let storageFailure = Code(.storageFailure)
        /// The content to send could not be read (file or download).
        public static let sourceFailure = Code(.sourceFailure)
        /// The resource is larger than the receiver takes, or than the protocol allows.
        public static let tooLarge = Code(.tooLarge)
        public static let invalidParameter = Code(.invalidParameter)

        public var description: String { "\(base)" }
    }

    public let code: Code
    /// The peer's STREAM_RESET code or RESOURCE_CANCEL reason, when the peer ended it.
    public let peerCode: UInt16?
    /// Detail for logs (an errno text, a file name); never payload bytes.
    public let detail: String?

    public init(_ code: Code, peerCode: UInt16? = nil, detail: String? = nil) {
        self.code = code
        self.peerCode = peerCode
        self.detail = detail
    }

    package static func fromPeerReset(_ code: StreamResetCode) -> TransferError {
        switch code {
        case .cancelled: TransferError(.cancelledByPeer, peerCode: code.rawValue)
        case .refused: TransferError(.refusedByPeer, peerCode: code.rawValue)
        default: TransferError(.resetByPeer, peerCode: code.rawValue)
        }
    }

    package static func fromPeerCancel(_ reason: ResourceCancelReason) -> TransferError {
        switch reason {
        case .cancelled: TransferError(.cancelledByPeer, peerCode: reason.rawValue)
        case .integrityFailure: TransferError(.integrityFailure, peerCode: reason.rawValue)
        case .storageFailure: TransferError(.storageFailure, peerCode: reason.rawValue)
        default: TransferError(.resetByPeer, peerCode: reason.rawValue)
        }
    }

    public var description: String {
        var text = "\(code)"
        if let peerCode { text += " (peer code \(peerCode))" }
        if let detail { text += ": \(detail)" }
        return text
    }
}
