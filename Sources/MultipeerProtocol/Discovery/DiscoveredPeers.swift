import MultipeerDNS
import MultipeerWire

/// Found and lost events, once per peer (docs/PROTOCOL.md §12.3), from what a browser resolved
/// for each instance. Both engines (the embedded browser and the system one over Avahi) report
/// through this, so they agree on what a peer is and when it is found or lost.
package struct DiscoveredPeers {
    package typealias FoundPeer = MDNSBrowserCore.FoundPeer
    package typealias Endpoint = MDNSBrowserCore.Endpoint

    let localIdentifier: Bytes16
    private(set) var reported: [Bytes16: FoundPeer] = [:]

    init(localIdentifier: Bytes16) {
        self.localIdentifier = localIdentifier
    }

    /// The peer an instance describes: its TXT names one (§12.2) and at least one address is known.
    static func peer(instance: DNSName, txt: [[UInt8]], endpoints: [Endpoint]) -> FoundPeer? {
        guard !endpoints.isEmpty, let (peer, info) = DiscoveryTXT.decode(txt) else { return nil }
        // IPv4 first, then by address: the same list whichever engine or packet order produced it.
        let sorted = Set(endpoints).sorted {
            ($0.address.isIPv6 ? 1 : 0, $0.address.description, $0.interfaceIndex) < ($1.address.isIPv6 ? 1 : 0, $1.address.description, $1.interfaceIndex)
        }
        return FoundPeer(peer: peer, discoveryInfo: info, endpoints: sorted, instance: instance)
    }

    /// Moves the reported peers to those `instances` describe, returning what changed: lost
    /// before found before moved (a reported peer whose addresses changed), each in identifier
    /// order.
    mutating func update(_ instances: [DNSName: FoundPeer]) -> [MDNSBrowserCore.Event] {
        var current: [Bytes16: FoundPeer] = [:]
        // One peer under several instance names (a renamed twin): the name that sorts first wins.
        for (instance, found) in instances where found.peer.identifier != localIdentifier {
            if let other = current[found.peer.identifier], !instance.labels[0].lexicographicallyPrecedes(other.instance.labels[0]) { continue }
            current[found.peer.identifier] = found
        }
        var events: [MDNSBrowserCore.Event] = []
        for (identifier, found) in reported.sorted(by: { $0.key < $1.key }) where current[identifier] == nil {
            events.append(.lost(found.peer))
        }
        var moves: [MDNSBrowserCore.Event] = []
        for (identifier, found) in current.sorted(by: { $0.key < $1.key }) {
            guard let before = reported[identifier] else {
                events.append(.found(found))
                continue
            }
            if Set(before.endpoints.map(\.address)) != Set(found.endpoints.map(\.address)) { moves.append(.moved(found)) }
        }
        reported = current
        return events + moves
    }

    /// Forgets every peer without events (the browser stopped).
    mutating func removeAll() { reported.removeAll() }
}
