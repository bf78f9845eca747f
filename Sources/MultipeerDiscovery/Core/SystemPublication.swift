/// What the system engine asks avahi-daemon to publish for one advertiser (docs/PROTOCOL.md
/// §12.1): the names and data are ours; Avahi adds the PTRs, probes, announces and answers.
struct SystemPublication: Equatable, Sendable {
    let instanceLabel: String
    /// `_T._tcp`
    let serviceType: String
    /// `mpc-hex(I)-T.local`
    let hostName: String
    let port: UInt16
    let txt: [[UInt8]]
    /// Where to publish, with the addresses for the host name (A over IPv4, AAAA over IPv6).
    let interfaces: [MDNSInterface]

    /// The same, on `interface` only: what one interface's entry group holds.
    func on(_ interface: MDNSInterface) -> SystemPublication {
        SystemPublication(instanceLabel: instanceLabel, serviceType: serviceType, hostName: hostName, port: port, txt: txt, interfaces: [interface])
    }
}
