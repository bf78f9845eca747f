import MultipeerDNS
import MultipeerWire
import NIOCore

/// An advertiser's instance and host names (docs/PROTOCOL.md §12.1) and the renaming rule on a
/// conflict, shared by the embedded responder and the system engine (Avahi) so both pick the
/// same names.
package struct InstanceNaming {
    let serviceType: ServiceType
    let peer: WirePeerID
    /// 1 for the plain names, then 2, 3, ... after conflicts.
    private(set) var suffix = 1
    private var recentConflicts: [NIODeadline] = []

    init(serviceType: ServiceType, peer: WirePeerID) {
        self.serviceType = serviceType
        self.peer = peer
    }

    /// `hex(I)`, then `hex(I)-2`, `hex(I)-3`, ...
    var instanceLabel: String { DiscoveryTXT.hex(peer.identifier) + suffixText }

    var instanceName: DNSName { try! serviceType.serviceName.prepending(Array(instanceLabel.utf8)) }

    /// `mpc-hex(I)-T`, one per advertiser, renamed with the instance.
    var hostLabel: String { "mpc-\(DiscoveryTXT.hex(peer.identifier))-\(serviceType.name)" + suffixText }

    var hostName: DNSName { try! DNSName(labels: [Array(hostLabel.utf8), Array("local".utf8)]) }

    private var suffixText: String { suffix == 1 ? "" : "-\(suffix)" }

    /// Moves to the next names after a conflict and returns how long to wait before probing
    /// them: at once, but 5 s after 15 conflicts within 10 s (RFC 6762 §8.1), so a spoofer cannot
    /// keep the advertiser renaming at its own pace.
    mutating func rename(now: NIODeadline) -> TimeAmount {
        suffix += 1
        recentConflicts = recentConflicts.filter { now - $0 < .seconds(10) } + [now]
        return recentConflicts.count >= 15 ? .seconds(5) : .zero
    }
}
