import NIOCore

/// The host's own IP addresses, written as a connection's local address is, so the core can
/// compare the two (`SessionCore.localAddressesChanged`).
enum HostAddresses {
    /// Every address of every interface now; nil when the system cannot say.
    static func current() -> Set<String>? {
        guard let devices = try? System.enumerateDevices() else { return nil }
        return Set(devices.compactMap { $0.address.flatMap(host) })
    }

    /// The address as text; an IPv4 address that an IPv6 socket shows mapped ("::ffff:10.0.0.1")
    /// as the IPv4 address it is.
    static func host(_ address: SocketAddress) -> String? {
        guard let text = address.ipAddress else { return nil }
        let mapped = "::ffff:"
        if text.lowercased().hasPrefix(mapped), text.contains(".") { return String(text.dropFirst(mapped.count)) }
        return text
    }
}
