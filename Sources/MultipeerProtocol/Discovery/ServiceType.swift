import MultipeerDNS

/// An application's service type as Apple's framework takes it (docs/PROTOCOL.md §12.1).
public struct ServiceType: Hashable, Sendable, CustomStringConvertible {
    public let name: String

    public init(_ name: String) throws(DiscoveryError) {
        let bytes = Array(name.utf8)
        func refuse(_ why: String) -> DiscoveryError {
            DiscoveryError(.invalidServiceType, "service type \"\(name)\": \(why)")
        }
        guard (1...15).contains(bytes.count) else { throw refuse("must be 1 to 15 characters") }
        let allowed = bytes.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
        guard allowed else { throw refuse("only lowercase ASCII letters, digits and hyphens") }
        guard bytes.contains(where: { (0x61...0x7A).contains($0) }) else { throw refuse("needs at least one letter") }
        guard bytes.first != 0x2D, bytes.last != 0x2D else { throw refuse("no hyphen first or last") }
        guard !name.contains("--") else { throw refuse("no adjacent hyphens") }
        self.name = name
    }

    /// `_name._tcp.local.`
    public var serviceName: DNSName { try! DNSName(labels: [Array("_\(name)".utf8), Array("_tcp".utf8), Array("local".utf8)]) }

    public var description: String { name }
}
