import Logging
import MultipeerWire

extension WirePeerID {
    /// How logs name a peer: its display name and the first bytes of its identifier.
    package var logValue: Logger.MetadataValue {
        .string("\(displayName) [\(identifier.bytes.prefix(4).map { String(format: "%02x", $0) }.joined())]")
    }
}
