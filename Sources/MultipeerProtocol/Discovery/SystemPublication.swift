/// What the system engine asks avahi-daemon to publish for one advertiser (docs/PROTOCOL.md
/// §12.1): the names and data are ours; Avahi adds the PTRs, probes, announces and answers.
package struct SystemPublication: Equatable, Sendable {
    package let instanceLabel: String
    /// `_T._tcp`
    package let serviceType: String
    /// `mpc-hex(I)-T.local`
    package let hostName: String
    package let port: UInt16
    package let txt: [[UInt8]]
    /// Where to publish, with the addresses for the host name (A over IPv4, AAAA over IPv6).
    package let interfaces: [MDNSInterface]

    /// The same, on `interface` only: what one interface's entry group holds.
    package func on(_ interface: MDNSInterface) -> SystemPublication {
        SystemPublication(instanceLabel: instanceLabel, serviceType: serviceType, hostName: hostName, port: port, txt: txt, interfaces: [interface])
    }
}
