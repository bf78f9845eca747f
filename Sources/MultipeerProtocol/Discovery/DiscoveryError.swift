/// Why a discovery request was refused or failed.
public struct DiscoveryError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case invalidServiceType, invalidDiscoveryInfo, invalidPeer, noInterface, socketFailed, systemUnavailable
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Not 1-15 characters of a-z, 0-9 and hyphens with a letter, no leading, trailing or double hyphen.
        public static let invalidServiceType = Code(.invalidServiceType)
        /// A key or value that does not fit a TXT string, a reserved key, or too much in all.
        public static let invalidDiscoveryInfo = Code(.invalidDiscoveryInfo)
        public static let invalidPeer = Code(.invalidPeer)
        /// None of the requested interfaces is up and multicast-capable.
        public static let noInterface = Code(.noInterface)
        /// The multicast socket could not be opened or joined.
        public static let socketFailed = Code(.socketFailed)
        /// The system engine was asked for, and Avahi's client library cannot be loaded, or
        /// avahi-daemon does not answer on the D-Bus system bus or refused the request.
        public static let systemUnavailable = Code(.systemUnavailable)

        public var description: String { "\(base)" }
    }

    public let code: Code
    /// The reason in words.
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code): \(reason)" }
}
