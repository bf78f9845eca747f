import CAvahiClient
import MultipeerDNS
import MultipeerProtocol

/// One Avahi entry group (C interop): an advertiser's records, published and withdrawn together.
/// Used only on the connection's poll thread or under its lock.
final class AvahiEntryGroup {
    enum State: Equatable {
        case established, collision
        case failure(String)
        /// Uncommitted or registering: nothing to do.
        case pending
    }

    private var group: OpaquePointer?
    private let onState: (State) -> Void

    /// `onState` runs on the poll thread.
    init(client: OpaquePointer, onState: @escaping (State) -> Void) throws(DiscoveryError) {
        self.onState = onState
        guard let made = cavahi_entry_group_new(client, entryGroupCallback, Unmanaged.passUnretained(self).toOpaque()) else {
            throw DiscoveryError(.systemUnavailable, "avahi_entry_group_new: \(AvahiConnection.describe(cavahi_client_errno(client)))")
        }
        group = made
    }

    /// Adds the service on each interface, with our own host name and its addresses (no reverse
    /// PTRs: they would name a host other than the machine's), then commits: Avahi probes next.
    func publish(_ publication: SystemPublication) throws(DiscoveryError) {
        guard let group else { return }
        func check(_ result: Int32, _ what: String) throws(DiscoveryError) {
            guard result >= 0 else { throw DiscoveryError(.systemUnavailable, "\(what): \(AvahiConnection.describe(result))") }
        }
        let txt = AvahiTXT.list(publication.txt)
        defer { cavahi_string_list_free(txt) }
        for interface in publication.interfaces {
            let index = AvahiIfIndex(interface.index)
            // No cookie string in TXT: the record holds §12.2's strings only.
            try check(
                cavahi_entry_group_add_service_strlst(
                    group, index, AvahiProtocol(AVAHI_PROTO_UNSPEC), AVAHI_PUBLISH_NO_COOKIE, publication.instanceLabel, publication.serviceType, nil,
                    publication.hostName, publication.port, txt),
                "publishing \(publication.instanceLabel) on \(interface.name)")
            for address in interface.addresses {
                var avahiAddress = Self.avahiAddress(address)
                let proto = address.isIPv6 ? AVAHI_PROTO_INET6 : AVAHI_PROTO_INET
                try check(
                    cavahi_entry_group_add_address(group, index, AvahiProtocol(proto), AVAHI_PUBLISH_NO_REVERSE, publication.hostName, &avahiAddress),
                    "publishing \(publication.hostName) \(address) on \(interface.name)")
            }
        }
        try check(cavahi_entry_group_commit(group), "committing \(publication.instanceLabel)")
    }

    /// Withdraws everything (goodbyes), keeping the group for the next publish.
    func reset() {
        if let group { cavahi_entry_group_reset(group) }
    }

    /// Withdraws everything and frees the group (no D-Bus call when the daemon is gone).
    func free() {
        if let group { cavahi_entry_group_free(group) }
        group = nil
    }

    fileprivate func changed(_ state: AvahiEntryGroupState) {
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED: onState(.established)
        case AVAHI_ENTRY_GROUP_COLLISION: onState(.collision)
        case AVAHI_ENTRY_GROUP_FAILURE:
            let client = group.flatMap { cavahi_entry_group_get_client($0) }
            onState(.failure(client.map { AvahiConnection.describe(cavahi_client_errno($0)) } ?? "entry group failed"))
        default: onState(.pending)
        }
    }

    static func avahiAddress(_ address: MDNSAddress) -> AvahiAddress {
        var result = AvahiAddress()
        switch address {
        case .ipv4(let value):
            result.proto = AvahiProtocol(AVAHI_PROTO_INET)
            result.data.ipv4.address = value.bigEndian
        case .ipv6(let bytes):
            result.proto = AvahiProtocol(AVAHI_PROTO_INET6)
            withUnsafeMutableBytes(of: &result.data.ipv6.address) { raw in
                for (index, byte) in bytes.prefix(16).enumerated() { raw[index] = byte }
            }
        }
        return result
    }
}

private let entryGroupCallback: AvahiEntryGroupCallback = { _, state, userdata in
    guard let userdata else { return }
    Unmanaged<AvahiEntryGroup>.fromOpaque(userdata).takeUnretainedValue().changed(state)
}
