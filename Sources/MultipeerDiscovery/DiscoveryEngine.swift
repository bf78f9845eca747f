import MultipeerProtocol
/// Which mDNS stack advertises and browses (docs/PROTOCOL.md §12.4). Both publish and report
/// the same things; the system engine leaves the host with one mDNS stack.
public struct DiscoveryEngine: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
        case automatic, embedded, system
    }
    private let base: Base
    private init(_ base: Base) { self.base = base }

    /// The system engine when Avahi's client library loads and avahi-daemon answers on the D-Bus
    /// system bus at start, else the embedded one.
    public static let automatic = DiscoveryEngine(.automatic)
    /// This library's own mDNS responder and querier, on UDP port 5353 of each interface.
    public static let embedded = DiscoveryEngine(.embedded)
    /// avahi-daemon over the D-Bus system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set), through
    /// libavahi-client.so.3 loaded at start; start throws `systemUnavailable` when the library
    /// cannot be loaded or the daemon does not answer.
    public static let system = DiscoveryEngine(.system)

    /// `automatic`, `embedded` or `system`.
    public init?(name: String) {
        switch name {
        case "automatic": self = .automatic
        case "embedded": self = .embedded
        case "system": self = .system
        default: return nil
        }
    }

    public var description: String { "\(base)" }
}
