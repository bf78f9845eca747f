import MultipeerWire

/// The TXT record of an advertising peer (docs/PROTOCOL.md §12.2): the peer's identity and the
/// application's discoveryInfo, as `key=value` strings.
public enum DiscoveryTXT {
    public static let reservedKeys: Set<String> = ["txtvers", "mpcid", "mpcdn"]
    /// RFC 6763 §6.2: TXT data that fits one packet with the rest of the answer.
    public static let maxTotalBytes = 1_300
    public static let maxStringBytes = 255

    /// Checks discoveryInfo as Apple documents it, plus the keys this protocol reserves.
    public static func validate(_ info: [String: String]) throws(DiscoveryError) {
        _ = try encode(try! WirePeerID(identifier: Bytes16(high: 1, low: 1), displayName: "x"), info: info)
    }

    public static func encode(_ peer: WirePeerID, info: [String: String]) throws(DiscoveryError) -> [[UInt8]] {
        var strings: [[UInt8]] = [Array("txtvers=1".utf8), Array("mpcid=\(hex(peer.identifier))".utf8), Array("mpcdn=".utf8) + Array(peer.displayName.utf8)]
        // Sorted, so that the record is the same every time it is built.
        for (key, value) in info.sorted(by: { $0.key < $1.key }) {
            let keyBytes = Array(key.utf8)
            guard !keyBytes.isEmpty, keyBytes.allSatisfy({ (0x20...0x7E).contains($0) && $0 != 0x3D }) else {
                throw DiscoveryError(.invalidDiscoveryInfo, "key \"\(key)\": 1 or more printable ASCII characters, no \"=\"")
            }
            guard !reservedKeys.contains(key.lowercased()) else {
                throw DiscoveryError(.invalidDiscoveryInfo, "key \"\(key)\" is reserved for the peer's identity")
            }
            let string = keyBytes + [0x3D] + Array(value.utf8)
            guard string.count <= maxStringBytes else {
                throw DiscoveryError(.invalidDiscoveryInfo, "\"\(key)=…\" is \(string.count) bytes, at most \(maxStringBytes)")
            }
            strings.append(string)
        }
        let total = strings.reduce(0) { $0 + 1 + $1.count }
        guard total <= maxTotalBytes else {
            throw DiscoveryError(.invalidDiscoveryInfo, "discoveryInfo makes a TXT record of \(total) bytes, at most \(maxTotalBytes)")
        }
        return strings
    }

    /// The peer and its discoveryInfo, or nil when the TXT does not describe a peer.
    public static func decode(_ strings: [[UInt8]]) -> (peer: WirePeerID, info: [String: String])? {
        var seen = Set<String>()
        var identifier: Bytes16?
        var displayName: String?
        var info: [String: String] = [:]
        for string in strings.prefix(256) {
            guard let equals = string.firstIndex(of: 0x3D), equals > 0 else { continue }
            let key = String(decoding: string[..<equals], as: UTF8.self)
            // RFC 6763 §6.4: keys are case-insensitive and only the first of a key counts.
            guard seen.insert(key.lowercased()).inserted else { continue }
            guard let value = String(validating: string[(equals + 1)...], as: UTF8.self) else { continue }
            switch key.lowercased() {
            case "mpcid": identifier = Bytes16(hex: value)
            case "mpcdn": displayName = value
            case "txtvers": continue
            default: info[key] = value
            }
        }
        guard let identifier, let displayName, let peer = try? WirePeerID(identifier: identifier, displayName: displayName) else {
            return nil
        }
        return (peer, info)
    }

    /// The identifier as the TXT record and instance names carry it: 32 lowercase hex digits.
    public static func hex(_ value: Bytes16) -> String { value.description }
}
