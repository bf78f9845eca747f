import CAvahiClient
import MultipeerProtocol

/// Avahi's service browser on every interface the daemon uses (C interop): interfaces that
/// come and go while it runs are the daemon's to follow. Used only on the connection's poll
/// thread or under its lock.
final class AvahiServiceBrowser {
    enum Event {
        case new(SystemServiceKey)
        case remove(SystemServiceKey)
        case failure(String)
    }

    private var browser: OpaquePointer?
    private let onEvent: (Event) -> Void

    /// Browses `type` (`_T._tcp`) in `local` on every interface, over IPv4 and IPv6.
    init(client: OpaquePointer, type: String, onEvent: @escaping (Event) -> Void) throws(DiscoveryError) {
        self.onEvent = onEvent
        guard
            let made = cavahi_service_browser_new(
                client, AvahiIfIndex(AVAHI_IF_UNSPEC), AvahiProtocol(AVAHI_PROTO_UNSPEC), type, "local", AvahiLookupFlags(rawValue: 0),
                serviceBrowserCallback, Unmanaged.passUnretained(self).toOpaque())
        else {
            throw DiscoveryError(.systemUnavailable, "avahi_service_browser_new: \(AvahiConnection.describe(cavahi_client_errno(client)))")
        }
        browser = made
    }

    func free() {
        if let browser { cavahi_service_browser_free(browser) }
        browser = nil
    }

    fileprivate func changed(
        interface: AvahiIfIndex, protocol: AvahiProtocol, event: AvahiBrowserEvent, name: UnsafePointer<CChar>?, domain: UnsafePointer<CChar>?
    ) {
        switch event {
        case AVAHI_BROWSER_NEW, AVAHI_BROWSER_REMOVE:
            guard let name, let domain else { return }
            let key = SystemServiceKey(
                interfaceIndex: Int(interface), ipv6: `protocol` == AvahiProtocol(AVAHI_PROTO_INET6), name: String(cString: name),
                domain: String(cString: domain))
            onEvent(event == AVAHI_BROWSER_NEW ? .new(key) : .remove(key))
        case AVAHI_BROWSER_FAILURE:
            let client = browser.flatMap { cavahi_service_browser_get_client($0) }
            onEvent(.failure(client.map { AvahiConnection.describe(cavahi_client_errno($0)) } ?? "browser failed"))
        default:
            break  // cache exhausted, all for now
        }
    }
}

/// Avahi's resolver for one service key (C interop): SRV, TXT and an address of the key's
/// protocol, reported again whenever they change. Used only on the poll thread or under its lock.
final class AvahiServiceResolver {
    enum Event {
        case found(address: MDNSAddress, port: UInt16, txt: [[UInt8]])
        case failure
    }

    private var resolver: OpaquePointer?
    private let onEvent: (Event) -> Void

    init(client: OpaquePointer, key: SystemServiceKey, type: String, onEvent: @escaping (Event) -> Void) throws(DiscoveryError) {
        self.onEvent = onEvent
        let proto = AvahiProtocol(key.ipv6 ? AVAHI_PROTO_INET6 : AVAHI_PROTO_INET)
        guard
            let made = cavahi_service_resolver_new(
                client, AvahiIfIndex(key.interfaceIndex), proto, key.name, type, key.domain, proto, AvahiLookupFlags(rawValue: 0),
                serviceResolverCallback, Unmanaged.passUnretained(self).toOpaque())
        else {
            throw DiscoveryError(.systemUnavailable, "avahi_service_resolver_new: \(AvahiConnection.describe(cavahi_client_errno(client)))")
        }
        resolver = made
    }

    func free() {
        if let resolver { cavahi_service_resolver_free(resolver) }
        resolver = nil
    }

    fileprivate func changed(event: AvahiResolverEvent, address: UnsafePointer<AvahiAddress>?, port: UInt16, txt: UnsafeMutablePointer<AvahiStringList>?) {
        guard event == AVAHI_RESOLVER_FOUND, let address, let converted = Self.address(address.pointee) else {
            onEvent(.failure)
            return
        }
        onEvent(.found(address: converted, port: port, txt: AvahiTXT.strings(txt)))
    }

    static func address(_ address: AvahiAddress) -> MDNSAddress? {
        var address = address
        switch address.proto {
        case AvahiProtocol(AVAHI_PROTO_INET): return .ipv4(UInt32(bigEndian: address.data.ipv4.address))
        case AvahiProtocol(AVAHI_PROTO_INET6): return .ipv6(withUnsafeBytes(of: &address.data.ipv6.address) { Array($0) })
        default: return nil
        }
    }
}

private let serviceBrowserCallback: AvahiServiceBrowserCallback = { _, interface, proto, event, name, _, domain, _, userdata in
    guard let userdata else { return }
    Unmanaged<AvahiServiceBrowser>.fromOpaque(userdata).takeUnretainedValue().changed(interface: interface, protocol: proto, event: event, name: name, domain: domain)
}

private let serviceResolverCallback: AvahiServiceResolverCallback = { _, _, _, event, _, _, _, _, address, port, txt, _, userdata in
    guard let userdata else { return }
    Unmanaged<AvahiServiceResolver>.fromOpaque(userdata).takeUnretainedValue().changed(event: event, address: address, port: port, txt: txt)
}
